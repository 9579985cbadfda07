"""cpu-smoke: a short, deterministic CPU computation whose answer is known in advance.

A wrong answer means a broken CPU, interpreter or image; a slow one shows in
`cpu-smoke-seconds`. The default takes about 0.1 s on one core.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from cairn.checks.report import CheckReport, option

ROUNDS = 100_000
EXPECTED = {100_000: "52f429563ecbf164efe23f9f77cd00073f5677600d721a6c754dc4e41124d645"}
"""sha256 applied `rounds` times to the empty string, for the round counts we know."""


def chain(rounds: int) -> str:
    digest = b""
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()


def run(params: Mapping[str, Any]) -> CheckReport:
    rounds = int(option(dict(params), "rounds", ROUNDS))
    t0 = time.perf_counter()
    got = chain(rounds)
    seconds = round(time.perf_counter() - t0, 6)
    readings: dict[str, int | float | str | bool] = {"cpu-smoke-seconds": seconds}
    want = EXPECTED.get(rounds)
    if want is not None and got != want:
        return CheckReport(check="cpu-smoke", status="failed", readings=readings,
                           message=f"sha256 chain gave {got[:16]}..., expected {want[:16]}...")
    return CheckReport(check="cpu-smoke", status="passed", readings=readings,
                       message=f"{rounds} sha256 rounds in {seconds:.3f}s")
