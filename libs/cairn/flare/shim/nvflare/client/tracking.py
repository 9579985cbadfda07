"""`nvflare.client.tracking`: FLARE's writers, as Cairn worker metrics."""

from cairn.flare.tracking import MLflowWriter, SummaryWriter, WandBWriter

__all__ = ["MLflowWriter", "SummaryWriter", "WandBWriter"]
