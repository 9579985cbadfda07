"""The model and its training: a small CNN for 8x8 digits, in PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - PyTorch's own spelling

from cairn.worker import torch as ct
from cairn.worker.workflows import ClientRound


class Net(nn.Module):
    """Two 3x3 convolutions and a linear layer: 8x8 -> 4x4 -> 2x2 -> 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def initial(seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return ct.arrays(Net())


def load(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    with np.load(path) as data:
        return torch.from_numpy(data["x"]), torch.from_numpy(data["y"])


def train(net: Net, weights: dict[str, np.ndarray], x: torch.Tensor, y: torch.Tensor,
          ctx: ClientRound, *, epochs: int, lr: float, batch: int, seed: int,
          momentum: float = 0.9
          ) -> dict[str, np.ndarray]:
    """`epochs` of SGD from `weights`, with the workflow's terms (FedProx, SCAFFOLD)."""
    ct.load(net, weights)
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    gen = torch.Generator().manual_seed(seed)
    steps = 0
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(batch):
            loss = F.cross_entropy(net(x[idx]), y[idx]) + ct.proximal_term(net, ctx)
            opt.zero_grad()
            loss.backward()
            ct.correct_gradients(net, ctx)
            opt.step()
            steps += 1
    ctx.local_steps, ctx.local_lr = steps, lr
    # Copies, not views: the module trains on while this update is still being sent.
    return {k: v.copy() for k, v in ct.arrays(net).items()}


@torch.no_grad()
def accuracy(net: Net, weights: dict[str, np.ndarray], x: torch.Tensor,
             y: torch.Tensor) -> float:
    ct.load(net, weights)
    net.eval()
    return float((net(x).argmax(1) == y).float().mean())
