"""Write the FedAvg example's synthetic, non-IID data into each site's dataset folder.

    python examples/fedavg/setup_data.py --sites-dir .cairn/up/sites [--hub hub] [--seed 0]

Every site folder under `--sites-dir` but the hub is a client site and gets
`<site>/data/shared/fedavg/{train,test}.npz`; the hub gets only `public_test.npz`, a small
public test set (drawn from the whole feature space), so the server never reads site data.

Non-IID by design (feature skew): every site's points spread along its own group of feature
dimensions and barely move along the others. A site alone cannot learn the weights of the
dimensions it barely sees, so its model is poor on the whole space; FedAvg combines what every
site learned and beats each of them. The labels come from one true linear model plus noise,
and everything is deterministic for a given seed and list of sites.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

DIM = 12
OTHER_SCALE = 0.05  # spread of a site's points along the dimensions that are not its own
LABEL_NOISE = 0.5


def _labels(rng: np.random.Generator, x: np.ndarray, w: np.ndarray, b: float) -> np.ndarray:
    return ((x @ w + b + rng.normal(scale=LABEL_NOISE, size=len(x))) > 0).astype(np.float64)


def make(clients: list[str], *, seed: int = 0, n_train: int = 2000, n_test: int = 500,
         n_public: int = 1000) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """{site: {"train": (x, y), "test": (x, y)}} plus {"<public>": {"public_test": ...}}."""
    rng = np.random.default_rng(seed)
    w, b = rng.normal(size=DIM), 0.2
    # Up to DIM sites, each its own group of dimensions; past that (`cairn sim --sites
    # 100`), each site one dimension, the sites taking them in turn.
    groups = (np.array_split(np.arange(DIM), len(clients)) if len(clients) <= DIM
              else [np.array([i % DIM]) for i in range(len(clients))])
    for group in groups:
        # Every site's dimensions matter as much: no site could do well alone by luck.
        w[group] *= 2.0 / np.linalg.norm(w[group])
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for site, group in zip(clients, groups, strict=True):
        scale = np.full(DIM, OTHER_SCALE)
        scale[group] = 1.0
        parts = {}
        for split, n in (("train", n_train), ("test", n_test)):
            x = rng.normal(size=(n, DIM)) * scale
            parts[split] = (x, _labels(rng, x, w, b))
        out[site] = parts
    x_pub = rng.normal(size=(n_public, DIM))
    out["<public>"] = {"public_test": (x_pub, _labels(rng, x_pub, w, b))}
    return out


def write(sites_dir: str | Path, *, hub: str = "hub", clients: list[str] | None = None,
          seed: int = 0) -> dict[str, list[Path]]:
    """Write every file; returns the paths per site."""
    root = Path(sites_dir)
    if clients is None:
        clients = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != hub)
    if not clients:
        raise SystemExit(f"no client sites under {root} (only the hub {hub!r})")
    data = make(clients, seed=seed)
    written: dict[str, list[Path]] = {}
    for site, parts in data.items():
        name = hub if site == "<public>" else site
        folder = root / name / "data" / "shared" / "fedavg"
        folder.mkdir(parents=True, exist_ok=True)
        for split, (x, y) in parts.items():
            path = folder / f"{split}.npz"
            np.savez(path, x=x, y=y)  # uncompressed: the tests look for these raw bytes
            written.setdefault(name, []).append(path)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites-dir", required=True, help="the federation's sites folder")
    ap.add_argument("--hub", default="hub", help="the hub site (gets the public test set)")
    ap.add_argument("--sites", default="", help="client sites, comma-separated "
                    "(default: every folder under --sites-dir but the hub)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    clients = [s for s in args.sites.split(",") if s] or None
    for site, paths in write(args.sites_dir, hub=args.hub, clients=clients,
                             seed=args.seed).items():
        for path in paths:
            print(f"{site}: {path}")


if __name__ == "__main__":
    main()
