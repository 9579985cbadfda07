"""`cairn snapshot` and `cairn diff` as a user runs them (through cairn.cli.main.main)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cairn.cli.main import main
from cairn.snapshot import encode, make_snapshot
from tests.output_contract import check_json_output

WHEN = datetime(2026, 1, 2, tzinfo=UTC)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        result = main(argv)
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    check_json_output(argv, code, out.out)
    return code, out.out, out.err


def write(path: Path, readings: dict[str, object]) -> Path:
    snap = make_snapshot(site="site-a", taken_at=WHEN, nodes={"n1": readings})  # type: ignore[dict-item]
    path.write_bytes(encode(snap))
    return path


def test_snapshot_json_and_out_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "snap.json"
    code, stdout, _ = run(["snapshot", "-o", "json", "--out", str(out)], capsys)
    assert code == 0
    printed = json.loads(stdout)
    saved = json.loads(out.read_text())
    assert printed["digest"] == saved["digest"]
    assert printed["format"] == 1 and printed["site"] is None
    node = printed["nodes"][0]["measurements"]
    assert node["CPU"]["info"]["threads"] >= 1
    assert "ID" in node["OS"]["release"]


def test_snapshot_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["snapshot"], capsys)
    assert code == 0
    assert "CPU.info.threads" in stdout and "node " in stdout


def test_snapshot_of_a_site_needs_the_bus(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_NATS_URL", raising=False)
    monkeypatch.setenv("CAIRN_CONTEXT", str(tmp_path / "no-context.yaml"))
    code, _, err = run(["snapshot", "--site", "site-a"], capsys)
    assert code == 7
    assert "no federation found" in err and "Traceback" not in err
    code, _, err = run(["snapshot", "--site", "Bad.Site"], capsys)
    assert code == 3


def test_diff_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.json", {"GPU.smi.gpu-count": 8, "OS.release.ID": "ubuntu"})
    b = write(tmp_path / "b.json", {"GPU.smi.gpu-count": 7, "OS.release.ID": "ubuntu"})
    code, stdout, _ = run(["diff", str(a), str(a)], capsys)
    assert (code, stdout.strip()) == (0, "snapshots are equal")
    code, stdout, _ = run(["diff", str(a), str(b), "-o", "json"], capsys)
    assert code == 1
    assert json.loads(stdout) == [
        {"path": "GPU.smi.gpu-count", "node": "n1", "before": 8, "after": 7}
    ]
    code, _, _ = run(["diff", str(a), str(b), "--ignore", "GPU.*"], capsys)
    assert code == 0


def test_diff_of_a_bad_file_is_one_line_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path / "a.json", {"X.y.z": 1})
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    code, _, err = run(["diff", str(a), str(bad)], capsys)
    assert code == 3
    assert str(bad) in err and len(err.strip().splitlines()) == 1
    code, _, err = run(["diff", str(tmp_path / "missing.json"), str(a)], capsys)
    assert code == 3 and "missing.json" in err


def test_diff_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(["diff", "--help"], capsys)
    assert code == 0
    assert "0 the snapshots are equal; 1 they differ" in " ".join(stdout.split())
