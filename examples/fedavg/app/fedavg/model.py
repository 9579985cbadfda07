"""Logistic regression in numpy: the model is a dict of arrays, so FedAvg averages it as is."""

from __future__ import annotations

from pathlib import Path

import numpy as np

Model = dict[str, np.ndarray]


def load(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as data:
        return data["x"], data["y"]


def init(dim: int) -> Model:
    return {"w": np.zeros(dim), "b": np.zeros(1)}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


def train(model: Model, x: np.ndarray, y: np.ndarray, *, epochs: int, lr: float,
          mu: float = 0.0, correction: Model | None = None) -> Model:
    """Full-batch gradient descent on the log loss, starting from `model`.

    `mu` adds FedProx's proximal term (pulling towards `model`), `correction` SCAFFOLD's
    control-variate correction to every step; both come from the workflow (`ctx`).
    """
    w, b = model["w"].astype(float).copy(), model["b"].astype(float).copy()
    w0, b0 = w.copy(), b.copy()
    for _ in range(epochs):
        err = _sigmoid(x @ w + b[0]) - y
        gw, gb = (x.T @ err) / len(y) + mu * (w - w0), err.mean() + mu * (b - b0)
        if correction is not None:
            gw, gb = gw + correction["w"], gb + correction["b"]
        w -= lr * gw
        b -= lr * gb
    return {"w": w, "b": b}


def accuracy(model: Model, x: np.ndarray, y: np.ndarray) -> float:
    predicted = (x @ model["w"] + model["b"][0]) > 0
    return float((predicted == (y > 0.5)).mean())
