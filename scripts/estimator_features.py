"""OTClustering's default on features (no autoencoder: size-constrained k-means) against k-means, told the true
class shares: ``python scripts/estimator_features.py`` writes results/estimator_features.md (README's numbers).

Blob family: K unit-variance Gaussian blobs in d dimensions, centers drawn at random at a mean distance of about
``separation``, shares geometric with largest / smallest r, 2,000 points; d in {2, 10, 50}, separation in
{2, 3, 4}, r in {1, 3, 10}, K in {3, 5}, data seeds 0-1 (108 data sets). Real feature sets: scikit-learn's bundled
wine, breast cancer, iris and digits (8x8), standardised. k-means: sklearn, 10 restarts, random_state 0;
OTClustering: defaults, random_state 0. Accuracy is Hungarian-matched; the size error is the largest
|cluster share - its matched class's share| (lit_otclust.metrics). The last column: does the size-constrained
objective prefer the classes? "yes" where Lloyd's iterations started from the class means, each class carrying its
share, end at a transport cost at or below that of OTClustering's centers; "no" marks a data set where the objective's
optimum is another partition, which no better search would turn into the classes.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.preprocessing import StandardScaler

from lit_otclust import OTClustering
from lit_otclust.clustering import constrained_lloyd
from lit_otclust.metrics import hungarian_accuracy


def blobs(shares: np.ndarray, n: int, dim: int, separation: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((len(shares), dim))
    centers *= separation / np.sqrt(2) / np.linalg.norm(centers, axis=1, keepdims=True).mean()
    y = np.repeat(np.arange(len(shares)), np.round(shares * n).astype(int))
    return centers[y] + rng.standard_normal((len(y), dim)), y


def scores(labels: np.ndarray, y: np.ndarray, k: int) -> tuple[float, float]:
    out = hungarian_accuracy(torch.as_tensor(labels), torch.as_tensor(y), k, k)
    return float(out["acc"]), float(out["size_error"])


def compare(x: np.ndarray, y: np.ndarray) -> tuple[float, ...]:
    """k-means' accuracy and size error, OTClustering's, its fit time, and whether the size-constrained objective
    prefers the classes: the transport cost of the size-constrained k-means started from the class means (each
    class carrying its share) against that of OTClustering's centers (1: at or below it)."""
    k = len(np.unique(y))
    km = scores(KMeans(k, n_init=10, random_state=0).fit(x).labels_, y, k)
    w = np.bincount(y) / len(y)
    start = time.perf_counter()
    model = OTClustering(k, proportions=w.tolist(), random_state=0).fit(x)
    seconds = time.perf_counter() - start
    ot = scores(model.labels_, y, k)
    z, w = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(w)
    found, _, _ = constrained_lloyd(z, w, torch.as_tensor(model.cluster_centers_, dtype=torch.float64), max_iter=0)
    classes, _, _ = constrained_lloyd(z, w, torch.stack([z[torch.as_tensor(y) == j].mean(0) for j in range(k)]))
    return *km, *ot, seconds, float(classes <= found * (1 + 1e-6))


def main(out: Path) -> None:
    rows, family = [], []
    for dim in (2, 10, 50):
        for separation in (2.0, 3.0, 4.0):
            for ratio in (1, 3, 10):
                for k in (3, 5):
                    shares = np.array([ratio ** (-j / (k - 1)) for j in range(k)])
                    for seed in (0, 1):
                        result = compare(*blobs(shares / shares.sum(), 2000, dim, separation, seed))
                        family.append(result)
                        rows.append(f"| blobs d={dim} sep={separation:g} r={ratio} K={k} seed={seed} | "
                                    + " | ".join(f"{v:.3f}" for v in result[:4]) + f" | {result[4]:.1f} | {'yes' if result[5] else 'no'} |")
    real = []
    for name, loader in (("wine", load_wine), ("breast cancer", load_breast_cancer), ("iris", load_iris),
                         ("digits", load_digits)):
        x, y = loader(return_X_y=True)
        result = compare(StandardScaler().fit_transform(x), y)
        real.append(result)
        rows.append(f"| {name} ({len(y)} x {x.shape[1]}, shares {' / '.join(f'{v:.2f}' for v in np.bincount(y) / len(y))})"
                    " | " + " | ".join(f"{v:.3f}" for v in result[:4]) + f" | {result[4]:.1f} | {'yes' if result[5] else 'no'} |")
    f = np.array(family)
    below = f[:, 2] < f[:, 0] - 0.005
    summary = [
        (f"Blob family ({len(f)} data sets): OTClustering at or above k-means' accuracy (within 0.005) on "
         f"{int((f[:, 2] >= f[:, 0] - 0.005).sum())}, mean accuracy {f[:, 2].mean():.3f} against {f[:, 0].mean():.3f}; "
         f"size error within 0.03 on {int((f[:, 3] <= 0.03).sum())} (k-means {int((f[:, 1] <= 0.03).sum())}); "
         f"fit time median {np.median(f[:, 4]):.1f} s, max {f[:, 4].max():.1f} s. Of the {int(below.sum())} below "
         f"k-means, the size-constrained objective prefers another partition to the classes on "
         f"{int((below & (f[:, 5] == 0)).sum())} (started from the class means, it ends at a higher transport cost "
         "than OTClustering's centers): there no search finds the classes."),
        "Real feature sets: " + "; ".join(f"{n} {r[2]:.3f} against k-means' {r[0]:.3f}" for n, r in
                                          zip(("wine", "breast cancer", "iris", "digits"), real)) + "."]
    text = [__doc__.strip(), "", *summary, "",
            ("| data | k-means acc | k-means size error | OTClustering acc | OTClustering size error | fit s "
             "| objective prefers the classes |"),
            "|---|---|---|---|---|---|---|", *rows]
    out.write_text("\n".join(text) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "results" / "estimator_features.md")
