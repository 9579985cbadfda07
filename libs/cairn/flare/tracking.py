"""FLARE's experiment tracking writers (`nvflare.client.tracking`), as Cairn worker metrics.

`SummaryWriter().add_scalar("loss", 0.3, global_step=2)` publishes `worker.metric` with
`{"loss": 0.3}` at step 2, which `cairn job show` and the event log carry; nothing is
written to TensorBoard files on the site.
"""

from __future__ import annotations

from typing import Any

from cairn.flare import client


class SummaryWriter:
    """TensorBoard-style scalars as worker metrics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        client.init()  # FLARE's writers work once the Client API is up; this brings it up

    def add_scalar(self, tag: str, scalar: float, global_step: int | None = None,
                   **kwargs: Any) -> None:
        client.log(tag, scalar, global_step=global_step)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict[str, float],
                    global_step: int | None = None, **kwargs: Any) -> None:
        for tag, value in tag_scalar_dict.items():
            client.log(f"{main_tag}_{tag}", value, global_step=global_step)

    def flush(self) -> None:
        """Metrics are published as they are added."""

    def close(self) -> None:
        """Nothing to close."""


class MLflowWriter:
    """MLflow-style metrics as worker metrics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        client.init()

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        client.log(key, value, global_step=step)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            client.log(key, value, global_step=step)


class WandBWriter:
    """Weights & Biases-style metrics as worker metrics."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        client.init()

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            client.log(key, value, global_step=step)
