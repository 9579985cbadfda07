"""`make bench` section `hostile`: what refusing hostile operator files costs.

Each case runs `cairn job submit FILE` in a fresh process (no federation needed: the spec is
checked before connecting) and records its wall time and peak RSS (`getrusage` of the child).
The baseline is `cairn job submit --help`: the interpreter with the CLI imported.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Nine levels of nine aliases: 9**9 (387 million) strings once expanded.
BOMB = "name: bomb\na: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
    f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True)
)


def _cases(folder: Path) -> dict[str, list[str]]:
    bomb = folder / "bomb.yaml"
    bomb.write_text(BOMB, encoding="utf-8")
    deep = folder / "deep.yaml"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    big = folder / "big.yaml"
    with big.open("w", encoding="utf-8") as out:
        out.write("name: big\n")
        for _ in range(64):
            out.write("# " + "x" * (1 << 20) + "\n")  # 64 MiB of comment
    latin = folder / "latin1.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    return {"help": ["--help"], "bomb": [str(bomb)], "deep-nesting": [str(deep)],
            "64MiB": [str(big)], "not-utf8": [str(latin)]}


def _measure(args: list[str]) -> dict[str, Any]:
    """One child: wall seconds, peak RSS (MiB), exit code, first line of stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cairn", "job", "submit", *args],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "CAIRN_CONTEXT": "/nonexistent/ctx"})
    took = time.perf_counter() - started
    # RUSAGE_CHILDREN's maxrss is the largest child so far: run the cheap baseline first.
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"seconds": round(took, 3), "peak_rss_mib": round(max(peak_kib, before) / 1024, 1),
            "exit": done.returncode, "message": (done.stderr.strip().splitlines() or [""])[0]}


def _refusal_ms(repeat: int = 200) -> float:
    """In-process milliseconds for `cairn.yamlfile.parse` to refuse the bomb."""
    from cairn import yamlfile
    from cairn.errors import InvalidInput

    started = time.perf_counter()
    for _ in range(repeat):
        try:
            yamlfile.parse(BOMB, "bomb.yaml")
        except InvalidInput:
            pass
    return round((time.perf_counter() - started) * 1000 / repeat, 3)


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-hostile-") as tmp:
        cases = _cases(Path(tmp))
        out: dict[str, Any] = {name: _measure(args) for name, args in cases.items()}
    for case in out.values():
        case["message"] = case["message"].replace(tmp, "<tmp>")[:160]
    out["bomb_refusal_in_process_ms"] = _refusal_ms()
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
