"""Operator files are read at bounded cost: size, alias expansion, depth, encoding."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cairn import yamlfile
from cairn.errors import InvalidInput
from cairn.recipes.catalog import load_recipe_file
from cairn.spec.job import load_job_spec
from cairn.spec.runtime import load_study_runtime
from cairn.yamlfile import YamlLimits

# Nine levels of nine aliases: 9**9 (387 million) strings once expanded.
BOMB = "name: bomb\na: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True)
)

JOB = textwrap.dedent("""\
    name: ok
    sites: &sites [site-a, site-b]
    roles:
      client: {image: python:3.12, sites: *sites}
      server: {image: python:3.12, sites: *sites}
    """)


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def test_bomb_is_refused_naming_the_limit_and_line() -> None:
    with pytest.raises(InvalidInput) as err:
        yamlfile.parse(BOMB, "bomb.yaml")
    text = str(err.value)
    assert text.startswith("bomb.yaml:")
    assert "CAIRN_YAML_MAX_NODES" in text


def test_bomb_as_a_job_spec_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    """The loader runs in its own process so its peak memory is its own."""
    bomb = write(tmp_path, "bomb.yaml", BOMB)
    probe = textwrap.dedent(f"""\
        from cairn.errors import InvalidInput
        from cairn.spec.job import load_job_spec
        try:
            load_job_spec({str(bomb)!r})
        except InvalidInput as exc:
            print("refused:", exc)
        # VmHWM is this process's own peak: ru_maxrss would also count the pytest process
        # this one was forked from (Linux keeps the pre-exec peak in it).
        with open("/proc/self/status") as status:
            print(next(l.split()[1] for l in status if l.startswith("VmHWM:")))
        """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out[0].startswith(f"refused: {bomb}:")
    peak_kib = int(out[-1])
    # An interpreter with Cairn's spec modules imported is ~30 MiB; expanding the bomb is GBs.
    assert peak_kib < 150 * 1024, f"peak RSS {peak_kib} KiB"


def test_aliases_within_the_limit_still_load(tmp_path: Path) -> None:
    doc = yamlfile.parse(JOB, "job.yaml")
    assert doc.data["roles"]["server"]["sites"] == ["site-a", "site-b"]


def test_node_limit_counts_each_use_of_an_alias() -> None:
    text = "a: &a [1, 2, 3, 4]\nb: [*a, *a, *a]\n"
    # 1 mapping + 2 keys + (1 + 4) + (1 + 3 * 5) = 24 nodes
    yamlfile.parse(text, "f.yaml", limits=YamlLimits(max_nodes=24))
    with pytest.raises(InvalidInput, match="more than the limit of 23 nodes"):
        yamlfile.parse(text, "f.yaml", limits=YamlLimits(max_nodes=23))


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"f\.yaml:1: alias \*a refers to a collection"):
        yamlfile.parse("a: &a [1, *a]\n", "f.yaml")


def test_deep_nesting_is_refused_before_recursion() -> None:
    text = "[" * 100 + "]" * 100
    with pytest.raises(InvalidInput, match="nested deeper than the limit of 64"):
        yamlfile.parse(text, "deep.yaml")


def test_size_limit_is_configurable_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write(tmp_path, "job.yaml", JOB + "# " + "x" * 2000 + "\n")
    monkeypatch.setenv("CAIRN_YAML_MAX_BYTES", "1024")
    with pytest.raises(InvalidInput) as err:
        load_job_spec(spec)
    assert str(err.value) == (f"{spec}: larger than the limit of 1024 bytes "
                              "(CAIRN_YAML_MAX_BYTES)")
    monkeypatch.setenv("CAIRN_YAML_MAX_BYTES", "lots")
    with pytest.raises(InvalidInput, match="CAIRN_YAML_MAX_BYTES: must be a positive"):
        load_job_spec(spec)


def test_an_endless_file_is_refused_before_it_is_read() -> None:
    with pytest.raises(InvalidInput, match=r"/dev/zero: not a regular file \(a character"):
        yamlfile.read_text("/dev/zero")


def test_not_utf8_names_the_file_and_byte_offset(tmp_path: Path) -> None:
    spec = write(tmp_path, "job.yaml", b"name: caf\xe9\n")
    with pytest.raises(InvalidInput) as err:
        load_job_spec(spec)
    assert str(err.value) == f"{spec}: not UTF-8: byte 0xe9 at byte offset 9"


def test_not_utf8_study_runtime_and_recipe(tmp_path: Path) -> None:
    runtime = write(tmp_path, "study_runtime.yaml", b"format: 1\n\xff\n")
    with pytest.raises(InvalidInput, match=r"study_runtime\.yaml: not UTF-8: .* offset 10"):
        load_study_runtime(runtime)
    (tmp_path / "overlays").mkdir()
    recipe = write(tmp_path, "overlays/r.yaml", b"name: r\n\x80")
    with pytest.raises(InvalidInput) as err:
        load_recipe_file(recipe, "overlay", tmp_path)
    assert str(err.value) == "overlays/r.yaml: not UTF-8: byte 0x80 at byte offset 8"


def test_bomb_as_study_runtime_is_refused(tmp_path: Path) -> None:
    runtime = write(tmp_path, "study_runtime.yaml", BOMB.replace("name: bomb", "format: 1"))
    with pytest.raises(InvalidInput, match="CAIRN_YAML_MAX_NODES"):
        load_study_runtime(runtime)


def test_cli_refuses_the_bomb_with_exit_3_and_no_traceback(tmp_path: Path) -> None:
    bomb = write(tmp_path, "bomb.yaml", BOMB)
    done = subprocess.run([sys.executable, "-m", "cairn", "job", "submit", str(bomb)],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "CAIRN_CONTEXT": str(tmp_path / "no")})
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {bomb}:")
