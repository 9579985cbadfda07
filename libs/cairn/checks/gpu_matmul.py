"""gpu-matmul: dense matrix multiply on each visible GPU; reports the slowest GPU's TFLOP/s.

Uses PyTorch when importable, else CuPy; with neither (or no CUDA device) the check is
skipped with that reason, which keeps its phase from passing. BF16 by default (CuPy has no
BF16 matmul, so it falls back to FP16 and says so).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from typing import Any

from cairn.checks.report import CheckReport, option

NAME = "gpu-matmul"


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:  # an absent or broken install (no CUDA libraries) are both "not here"
        return None


def tflops(size: int, iterations: int, seconds: float) -> float:
    """Throughput of `iterations` n x n matmuls (2 n^3 flops each)."""
    return 2.0 * size**3 * iterations / seconds / 1e12 if seconds > 0 else 0.0


def _torch(torch: Any, device: int, size: int, dtype: str, iterations: int) -> float:
    kind = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    with torch.cuda.device(device):
        a = torch.randn(size, size, device="cuda", dtype=kind)
        b = torch.randn(size, size, device="cuda", dtype=kind)
        for _ in range(3):  # warm-up: cuBLAS picks its kernel on the first calls
            a @ b
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iterations):
            a @ b
        torch.cuda.synchronize()
        return tflops(size, iterations, time.perf_counter() - t0)


def _cupy(cupy: Any, device: int, size: int, iterations: int) -> float:
    with cupy.cuda.Device(device):
        a = cupy.random.random((size, size)).astype(cupy.float16)
        b = cupy.random.random((size, size)).astype(cupy.float16)
        for _ in range(3):
            a @ b
        cupy.cuda.Device(device).synchronize()
        t0 = time.perf_counter()
        for _ in range(iterations):
            a @ b
        cupy.cuda.Device(device).synchronize()
        return tflops(size, iterations, time.perf_counter() - t0)


def run(params: Mapping[str, Any]) -> CheckReport:
    p = dict(params)
    size = int(option(p, "size", 8192))
    dtype = str(option(p, "dtype", "bf16"))
    iterations = int(option(p, "iterations", 50))
    if dtype not in ("bf16", "fp16", "fp32"):
        return CheckReport(check=NAME, status="error", message=f"dtype {dtype!r}: use bf16, "
                           "fp16 or fp32")
    torch = _import("torch")
    per_gpu: list[float] = []
    engine = ""
    if torch is not None and torch.cuda.is_available():
        engine = f"torch {torch.__version__} {dtype}"
        per_gpu = [_torch(torch, i, size, dtype, iterations)
                   for i in range(torch.cuda.device_count())]
    else:
        cupy = _import("cupy")
        if cupy is not None and cupy.cuda.runtime.getDeviceCount() > 0:
            engine = "cupy fp16 (no bf16 matmul in CuPy)"
            per_gpu = [_cupy(cupy, i, size, iterations)
                       for i in range(cupy.cuda.runtime.getDeviceCount())]
        elif torch is None and cupy is None:
            return CheckReport(check=NAME, status="skipped",
                               message="neither torch nor cupy is importable in the worker")
    if not per_gpu:
        return CheckReport(check=NAME, status="skipped",
                           message="no CUDA device visible to torch or cupy")
    slowest = round(min(per_gpu), 1)
    return CheckReport(check=NAME, status="passed", readings={NAME: slowest},
                       details={"per_gpu_tflops": [round(t, 1) for t in per_gpu],
                                "engine": engine, "size": size, "iterations": iterations},
                       message=f"slowest of {len(per_gpu)} GPUs: {slowest} TFLOP/s ({engine})")
