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


def train(model: Model, x: np.ndarray, y: np.ndarray, *, epochs: int, lr: float) -> Model:
    """Full-batch gradient descent on the log loss, starting from `model`."""
    w, b = model["w"].astype(float).copy(), model["b"].astype(float).copy()
    for _ in range(epochs):
        err = _sigmoid(x @ w + b[0]) - y
        w -= lr * (x.T @ err) / len(y)
        b -= lr * err.mean()
    return {"w": w, "b": b}


def accuracy(model: Model, x: np.ndarray, y: np.ndarray) -> float:
    predicted = (x @ model["w"] + model["b"][0]) > 0
    return float((predicted == (y > 0.5)).mean())
