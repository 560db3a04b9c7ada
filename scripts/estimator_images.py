"""OTClustering's recipes on images, off MNIST's full set:
``python scripts/estimator_images.py`` writes results/estimator_images.md (RESULTS' numbers).

Data, 10 classes each: scikit-learn's 1,797 8x8 digits (values / 16); a class-stratified 5,000 of MNIST's training
images and of CIFAR-10's (uint8, divided by 255 in ``fit``). Variants, each fit on the whole set and scored on it
(Hungarian accuracy of ``labels_``), seeds 0-2, one thread:

- k-means on the pixels (scikit-learn, 10 restarts): the floor;
- an MLP autoencoder trained from scratch with the OT loss, 200 epochs, batch 300, no pre-training (the paper's
  Algorithm 2), its centers from k-means, never refit (the first three rows pin this, ``KMEANS``);
- the folder config's recipe (configs/folder_example.yaml, measured on PNG folders of these sets): 10 epochs of
  pre-training then 40 joint, batch 64, the conv autoencoder where the sides divide by 8 (the estimator's default
  there), the MLP otherwise (MNIST's 28: the same fit as the row below);
- the same schedule on the MLP, to tell the schedule from the network;
- the estimator's schedule (the MLP's or the conv autoencoder's, as ``"auto"`` picks) with the size-constrained
  partition during training: the centers start from size-constrained k-means with equal sizes and are refit by it
  every quarter of the joint epochs (``center_init="constrained"``, ``refit_every``), as it pays in
  configs/studies/joint_phase.yaml; and the same on the MLP from scratch (on MNIST the same fit as the row above).
  The last is the estimator's default for images whose sides do not divide by 8, the conv folder recipe the default
  where they do.

``--only TEXT`` (``--data TEXT``) runs the variants (data sets) whose name holds TEXT and replaces their rows in the
table, keeping the others.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits

from lit_otclust import OTClustering
from lit_otclust.metrics import hungarian_accuracy

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def accuracy(labels: np.ndarray, y: np.ndarray) -> float:
    return float(hungarian_accuracy(torch.as_tensor(labels), torch.as_tensor(y), 10, 10)["acc"])


def stratified(y: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Indices of a seeded sample of n with every class's share kept (n / K of each of K equal classes)."""
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    return np.concatenate([rng.choice(np.flatnonzero(y == c), n // len(classes), replace=False) for c in classes])


def _digits() -> tuple[np.ndarray, np.ndarray]:
    digits = load_digits()
    return (digits.images / 16).astype(np.float32), digits.target


def _stratified_5k(name: str) -> tuple[np.ndarray, np.ndarray]:
    from torchvision.datasets import CIFAR10, MNIST

    data = (MNIST if name == "mnist" else CIFAR10)(str(DATA), train=True, download=False)
    x, y = (data.data.numpy(), data.targets.numpy()) if name == "mnist" else (data.data, np.asarray(data.targets))
    index = stratified(y, 5000)
    return x[index], y[index]


# Each data set's loader, in the table's order: only the sets a run asks for are read.
DATASETS = {"digits (1,797, 8x8)": _digits,
            "MNIST 5k (28x28)": lambda: _stratified_5k("mnist"),
            "CIFAR-10 5k (32x32x3)": lambda: _stratified_5k("cifar10")}


def divides_by_8(x: np.ndarray) -> bool:
    """Whether the images' sides divide by 8: where the estimator's "auto" takes the conv autoencoder."""
    return all(side % 8 == 0 for side in x.shape[1:3])


KMEANS = {"center_init": "kmeans", "refit_every": 0}  # the centers from k-means, never refit (the MLP's default before)
SIZED = {"center_init": "constrained"}  # from size-constrained k-means with equal sizes, refit every quarter (below)
VARIANTS = {
    "the MLP from scratch (200 epochs, batch 300)": lambda x: {"autoencoder": "mlp", "max_epochs": 200,
                                                            "pretrain_epochs": 0, "batch_size": 300, **KMEANS},
    "the folder recipe (10 + 40 epochs, batch 64, conv)": lambda x: {
        "autoencoder": "conv" if divides_by_8(x) else "mlp",
        "pretrain_epochs": 10, "max_epochs": 50, "batch_size": 64, **KMEANS},
    "the folder schedule on the MLP": lambda x: {"autoencoder": "mlp", "pretrain_epochs": 10, "max_epochs": 50,
                                                  "batch_size": 64, **KMEANS},
    "the default schedule, size-constrained start and refits every quarter": lambda x: {
        **SIZED, "refit_every": 10 if divides_by_8(x) else 50},
    "the MLP from scratch, size-constrained start and refits every quarter": lambda x: {
        "autoencoder": "mlp", "max_epochs": 200, "pretrain_epochs": 0, "batch_size": 300, **SIZED, "refit_every": 50},
}


def table(rows: dict[tuple[str, str], str], seeds: list[int]) -> str:
    """The markdown table of ``rows``, (data, method) -> its row, in the order of the data sets and of the methods."""
    head = ["Hungarian accuracy of each fit on its whole set, mean ± sd over seeds "
            f"{seeds[0]}-{seeds[-1]}, and seconds a fit (one thread); `python scripts/estimator_images.py`.", "",
            "| data | method | accuracy | seconds |", "|---|---|---|---|"]
    order = {method: i for i, method in enumerate(["k-means on the pixels", *VARIANTS])}
    data_order = list(DATASETS)
    keys = sorted(rows, key=lambda key: (data_order.index(key[0]), order.get(key[1], len(order))))
    return "\n".join(head + [rows[key] for key in keys]) + "\n"


def read_rows(out: Path) -> dict[tuple[str, str], str]:
    """The rows of a table written before, (data, method) -> the row."""
    if not out.exists():
        return {}
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and not line.startswith("| data")]
    return {tuple(cell.strip() for cell in row.split("|")[1:3]): row for row in rows}


def row(name: str, method: str, accs: list[float], secs: list[float]) -> str:
    return f"| {name} | {method} | {np.mean(accs):.3f} ± {np.std(accs, ddof=1):.3f} | {np.mean(secs):.0f} |"


def main(out: Path, seeds: list[int], only: str | None = None, data: str | None = None) -> None:
    torch.set_num_threads(1)
    rows = read_rows(out) if only or data else {}
    for name, load in DATASETS.items():
        if data and data not in name:
            continue
        x, y = load()
        if not only:
            t = time.perf_counter()
            flat = x.reshape(len(x), -1).astype(np.float32) / (255.0 if x.dtype == np.uint8 else 1.0)
            km = [accuracy(KMeans(10, n_init=10, random_state=s).fit(flat).labels_, y) for s in seeds]
            secs = [(time.perf_counter() - t) / len(seeds)]
            rows[name, "k-means on the pixels"] = row(name, "k-means on the pixels", km, secs)
        for method, settings in VARIANTS.items():
            if only and only not in method:
                continue
            accs, secs = [], []
            for s in seeds:
                t = time.perf_counter()
                model = OTClustering(10, random_state=s, channels_last=x.ndim == 4, **settings(x)).fit(x)
                secs.append(time.perf_counter() - t)
                accs.append(accuracy(model.labels_, y))
                print(name, method, s, f"{accs[-1]:.3f}", f"{secs[-1]:.0f} s", flush=True)
            rows[name, method] = row(name, method, accs, secs)
            out.write_text(table(rows, seeds))  # after each row: a partial table survives a stop
    print(table(rows, seeds))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "results" / "estimator_images.md")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--only", help="run only the variants whose name holds this text; the table keeps the other rows")
    p.add_argument("--data", help="run only the data sets whose name holds this text; the table keeps the other rows")
    args = p.parse_args()
    main(args.out, args.seeds, args.only, args.data)
