"""Split scikit-learn's bundled handwritten digits across the sites, non-IID by label.

    python examples/digits/setup_data.py --sites-dir .cairn/sites [--hub hub] [--seed 0]

`load_digits` (1797 images of 8x8 pixels, shipped inside scikit-learn, so nothing is
downloaded) is split once, seeded: a fifth is the hub's public test set
(`<hub>/data/shared/digits/public_test.npz`, the server's evaluation), and the rest goes to
the client sites, each of which gets most of its images from its own group of digits
(`--skew`, 0.8: 80 % from its own classes, the rest spread over the others). Every client
site keeps a fifth of its share as its local test split (`test.npz`, for cross-site
evaluation) and trains on the rest (`train.npz`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

CLASSES = 10


def _load() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # N, 1, 8, 8 in [0, 1]
    return x, digits.target.astype(np.int64)


def make(clients: list[str], *, seed: int = 0, skew: float = 0.8
         ) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """{site: {"train": (x, y), "test": (x, y)}} plus {"<public>": {"public_test": ...}}."""
    x, y = _load()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    public, rest = order[: len(y) // 5], order[len(y) // 5:]
    groups = np.array_split(np.arange(CLASSES), len(clients))
    own = {c: i for i, g in enumerate(groups) for c in g}
    share: dict[int, list[int]] = {i: [] for i in range(len(clients))}
    for index in rest:
        home = own[int(y[index])]
        if rng.random() < skew or len(clients) == 1:
            share[home].append(int(index))
        else:
            others = [i for i in range(len(clients)) if i != home]
            share[int(rng.choice(others))].append(int(index))
    out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for i, site in enumerate(clients):
        mine = np.array(share[i])
        cut = len(mine) // 5
        out[site] = {"test": (x[mine[:cut]], y[mine[:cut]]),
                     "train": (x[mine[cut:]], y[mine[cut:]])}
    out["<public>"] = {"public_test": (x[public], y[public])}
    return out


def write(sites_dir: str | Path, *, hub: str = "hub", clients: list[str] | None = None,
          seed: int = 0, skew: float = 0.8) -> dict[str, list[Path]]:
    root = Path(sites_dir)
    if clients is None:
        clients = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != hub)
    if not clients:
        raise SystemExit(f"no client sites under {root} (only the hub {hub!r})")
    written: dict[str, list[Path]] = {}
    for site, parts in make(clients, seed=seed, skew=skew).items():
        name = hub if site == "<public>" else site
        folder = root / name / "data" / "shared" / "digits"
        folder.mkdir(parents=True, exist_ok=True)
        for split, (x, y) in parts.items():
            path = folder / f"{split}.npz"
            np.savez(path, x=x, y=y)
            written.setdefault(name, []).append(path)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites-dir", required=True, help="the federation's sites folder")
    ap.add_argument("--hub", default="hub", help="the hub site (gets the public test set)")
    ap.add_argument("--sites", default="", help="client sites, comma-separated "
                    "(default: every folder under --sites-dir but the hub)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skew", type=float, default=0.8,
                    help="share of a site's images from its own digits (0.1: IID)")
    args = ap.parse_args()
    clients = [s for s in args.sites.split(",") if s] or None
    for site, paths in write(args.sites_dir, hub=args.hub, clients=clients, seed=args.seed,
                             skew=args.skew).items():
        for path in paths:
            print(f"{site}: {path}")


if __name__ == "__main__":
    main()
