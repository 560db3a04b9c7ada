"""k-means restarts (n_init) on learned embeddings: how much do they move AE + k-means accuracy?

For each checkpoint, embeds all fitted images and runs sklearn's k-means++ with one init for
``--repeats`` seeds, recording accuracy (Hungarian), NMI and the k-means objective (inertia).
k-means with n_init = r keeps the lowest-inertia of r inits, so its expected accuracy follows
from the single-init runs exactly: rank them by inertia; the best of a random r-subset of R is the
i-th (0-based) with probability C(R-1-i, r-1) / C(R, r). ``--check_seeds`` runs of n_init = 10 are
made directly, as a check of that estimate.
Also the untrained encoder (the embedding that the OT / soft k-means runs without pre-training
initialise their centers on). Usage, from the repository root:

    python results/study_kmeans_inits.py --data_dir ../shared/data --out results/study_kmeans \
        --ckpts results/table1/runs/mnist_ae_kmeans__seed=*/checkpoints/last.ckpt ...
"""

from __future__ import annotations

import argparse
import json
from math import comb
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans

from lit_otclust.data import MNISTDataModule
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.models import MLPAutoencoder


def encoder_from_checkpoint(ckpt: str) -> tuple[torch.nn.Module, dict]:
    """The MNIST MLP encoder of a checkpoint, and the checkpoint. From the weights alone: the
    earlier sweeps' checkpoints predate the autoencoder config in hparams."""
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    ae = MLPAutoencoder((784,))
    ae.load_state_dict({k.removeprefix("autoencoder."): v for k, v in state["state_dict"].items()
                        if k.startswith("autoencoder.")})
    return ae.encoder, state


def embeddings(encoder: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return torch.cat([encoder(xb) for xb in x.split(10_000)]).double().numpy()


def best_of(accs: list[float], inertias: list[float], r: int) -> float:
    """Expected accuracy of the lowest-inertia run among r drawn without replacement from the runs."""
    order = np.argsort(inertias)
    weights = np.array([comb(len(accs) - 1 - i, r - 1) for i in range(len(accs))], dtype=float)
    return float(np.dot(weights / comb(len(accs), r), np.asarray(accs)[order]))


def study(name: str, z: np.ndarray, y: np.ndarray, repeats: int, check_seeds: int) -> list[dict]:
    rows = []
    for n_init, seeds in ((1, repeats), (10, check_seeds)):
        for seed in range(seeds):
            km = KMeans(n_clusters=10, n_init=n_init, random_state=seed, init="k-means++").fit(z)
            scores = hungarian_accuracy(torch.as_tensor(km.labels_), torch.as_tensor(y), 10, 10)
            rows.append({"embedding": name, "n_init": n_init, "seed": seed, "acc": float(scores["acc"]),
                         "nmi": float(scores["nmi"]), "inertia": float(km.inertia_)})
        accs = [r["acc"] for r in rows if r["n_init"] == n_init]
        print(f"{name} n_init={n_init} ({seeds} seeds): acc {np.mean(accs):.3f} ± {np.std(accs, ddof=1):.3f} "
              f"[{min(accs):.3f}, {max(accs):.3f}]", flush=True)
    single = [r for r in rows if r["n_init"] == 1]
    acc, inertia = [r["acc"] for r in single], [r["inertia"] for r in single]
    print(f"{name} best-of-10 estimate: acc {best_of(acc, inertia, 10):.3f}; "
          f"corr(inertia, acc) {np.corrcoef(inertia, acc)[0, 1]:+.2f}", flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default="../shared/data")
    p.add_argument("--out", default="results/study_kmeans")
    p.add_argument("--ckpts", nargs="*", default=[])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--check_seeds", type=int, default=2)
    p.add_argument("--untrained_seeds", nargs="*", type=int, default=[0])
    args = p.parse_args()
    torch.set_num_threads(1)
    dm = MNISTDataModule(data_dir=args.data_dir, download=False, fit_split="all")
    dm.setup("fit")
    x, y = dm.fit_set.x, dm.fit_set.y.numpy()
    rows = []
    for seed in args.untrained_seeds:
        torch.manual_seed(seed)
        rows += study(f"untrained encoder (seed {seed})", embeddings(MLPAutoencoder((784,)).encoder, x), y,
                      args.repeats, args.check_seeds)
    for ckpt in args.ckpts:
        encoder, state = encoder_from_checkpoint(ckpt)
        name = f"{Path(ckpt).parents[1].name} (epoch {state['epoch']})"
        rows += study(name, embeddings(encoder, x), y, args.repeats, args.check_seeds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kmeans_inits.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
