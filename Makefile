# Cairn: the two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-unit test-integration bench lint schemas check-schemas cli-docs setup clean images

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet --config-settings editable_mode=strict -e '.[dev,docker,gpu,kubernetes]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/cairn demo

test: $(STAMP)
	$(PY) tools/check_schemas.py
	$(PY) -m pytest -q -rs $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(PY) -m pytest -q -rs tests/unit tests/replay

test-integration: $(STAMP)
	$(PY) -m pytest -q -rs tests/integration

bench: $(STAMP)
	@$(PY) tools/bench.py

# The worker image, the parent image (every service: `cairn run ...`) and a NATS image, from
# this checkout and this host's Python (no registry): docker load'ed into the engine at
# DOCKER_HOST. deploy/images/<name>/build.py --help for more.
images: $(STAMP)
	$(PY) deploy/images/worker/build.py --load
	$(PY) deploy/images/cairn/build.py --load
	$(PY) deploy/images/nats/build.py --load

lint: $(STAMP)
	$(VENV)/bin/ruff check libs services tools tests examples
	$(VENV)/bin/mypy -p cairn

schemas: $(STAMP)
	$(PY) tools/export_schemas.py

cli-docs: $(STAMP)
	$(PY) tools/cli_docs.py

check-schemas: $(STAMP)
	$(PY) tools/check_schemas.py $(if $(AGAINST),--against $(AGAINST))

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .cairn

# Strict editable installs link files at install time: re-run after adding a module.
relink:
	flock /tmp/cairn-relink.lock $(PY) -m pip install --quiet --no-deps --no-build-isolation --config-settings editable_mode=strict -e .
