"""OTClustering's default on features (no autoencoder: size-constrained k-means) against k-means, told the true
class shares: ``python scripts/estimator_features.py`` writes results/estimator_features.md (README's numbers).

Blob family: K unit-variance Gaussian blobs in d dimensions, centers drawn at random at a mean distance of about
``separation``, shares geometric with largest / smallest r, 2,000 points; d in {2, 10, 50}, separation in
{2, 3, 4}, r in {1, 3, 10}, K in {3, 5}, data seeds 0-1 (108 data sets). Real feature sets: scikit-learn's bundled
wine, breast cancer, iris and digits (8x8), standardised, as they come and made long-tailed (the classes in
decreasing size keep shares falling by 0.75 from one to the next, a seeded sample of each class, seeds 0-2), and
MNIST's 10,000 test images (pixels / 255, PCA to 50 dimensions) made long-tailed the same way. k-means: sklearn, 10
restarts, random_state 0; OTClustering: defaults (``kmeans_n_init`` restarts of its search) and with 4 restarts,
random_state 0, one thread. Accuracy is Hungarian-matched; the size error is the largest |cluster share - its
matched class's share| (lit_otclust.metrics). The last column: does the size-constrained objective prefer the
classes? "yes" where Lloyd's iterations started from the class means, each class carrying its share, end at a
transport cost at or below that of OTClustering's centers; "no" marks a data set where the objective's optimum is
another partition, which no better search would turn into the classes.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.decomposition import PCA
from sklearn.preprocessing import StandardScaler

from lit_otclust import OTClustering
from lit_otclust.clustering import constrained_lloyd
from lit_otclust.metrics import hungarian_accuracy

REPO = Path(__file__).resolve().parents[1]


def blobs(shares: np.ndarray, n: int, dim: int, separation: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((len(shares), dim))
    centers *= separation / np.sqrt(2) / np.linalg.norm(centers, axis=1, keepdims=True).mean()
    y = np.repeat(np.arange(len(shares)), np.round(shares * n).astype(int))
    return centers[y] + rng.standard_normal((len(y), dim)), y


def long_tailed(x: np.ndarray, y: np.ndarray, seed: int, ratio: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """A seeded sample of each class: the j-th largest class keeps ``top * ratio**j`` rows, ``top`` as large as
    every class allows; the labels renumbered 0..K-1 by decreasing size."""
    rng = np.random.default_rng(seed)
    classes = np.argsort(-np.bincount(y), kind="stable")
    counts = np.bincount(y)[classes]
    top = min(counts / ratio ** np.arange(len(classes)))
    keep = [rng.choice(np.flatnonzero(y == c), int(top * ratio ** j), replace=False) for j, c in enumerate(classes)]
    return x[np.concatenate(keep)], np.repeat(np.arange(len(classes)), [len(k) for k in keep])


def mnist_pca() -> tuple[np.ndarray, np.ndarray]:
    from torchvision.datasets import MNIST

    test = MNIST(str(REPO.parent / "shared" / "data"), train=False, download=False)
    x = test.data.reshape(len(test.data), -1).numpy() / 255.0
    return PCA(50, random_state=0).fit_transform(x), test.targets.numpy()


def scores(labels: np.ndarray, y: np.ndarray, k: int) -> tuple[float, float]:
    out = hungarian_accuracy(torch.as_tensor(labels), torch.as_tensor(y), k, k)
    return float(out["acc"]), float(out["size_error"])


def compare(x: np.ndarray, y: np.ndarray) -> tuple[float, ...]:
    """k-means' accuracy and size error, OTClustering's, its fit time, its accuracy with 4 restarts, and whether
    the size-constrained objective prefers the classes (1: Lloyd from the class means ends at or below the transport
    cost of OTClustering's centers)."""
    k = len(np.unique(y))
    km = scores(KMeans(k, n_init=10, random_state=0).fit(x).labels_, y, k)
    w = np.bincount(y) / len(y)
    start = time.perf_counter()
    model = OTClustering(k, proportions=w.tolist(), random_state=0).fit(x)
    seconds = time.perf_counter() - start
    ot = scores(model.labels_, y, k)
    four = scores(OTClustering(k, proportions=w.tolist(), kmeans_n_init=4, random_state=0).fit(x).labels_, y, k)
    z, w = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(w)
    found, _, _ = constrained_lloyd(z, w, torch.as_tensor(model.cluster_centers_, dtype=torch.float64), max_iter=0)
    classes, _, _ = constrained_lloyd(z, w, torch.stack([z[torch.as_tensor(y) == j].mean(0) for j in range(k)]))
    return *km, *ot, seconds, four[0], float(classes <= found * (1 + 1e-6))


def row(name: str, result: tuple[float, ...]) -> str:
    return (f"| {name} | " + " | ".join(f"{v:.3f}" for v in result[:4]) + f" | {result[4]:.2f} | {result[5]:.3f} | "
            f"{'yes' if result[6] else 'no'} |")


def main(out: Path) -> None:
    torch.set_num_threads(1)
    rows, family = [], []
    for dim in (2, 10, 50):
        for separation in (2.0, 3.0, 4.0):
            for ratio in (1, 3, 10):
                for k in (3, 5):
                    shares = np.array([ratio ** (-j / (k - 1)) for j in range(k)])
                    for seed in (0, 1):
                        result = compare(*blobs(shares / shares.sum(), 2000, dim, separation, seed))
                        family.append(result)
                        rows.append(row(f"blobs d={dim} sep={separation:g} r={ratio} K={k} seed={seed}", result))
    real, tailed = [], {}
    sets = [(name, StandardScaler().fit_transform(x), y) for name, (x, y) in
            (("wine", load_wine(return_X_y=True)), ("breast cancer", load_breast_cancer(return_X_y=True)),
             ("iris", load_iris(return_X_y=True)), ("digits", load_digits(return_X_y=True)))]
    for name, x, y in sets:
        result = compare(x, y)
        real.append(result)
        rows.append(row(f"{name} ({len(y)} x {x.shape[1]}, shares "
                        f"{' / '.join(f'{v:.2f}' for v in np.bincount(y) / len(y))})", result))
    for name, x, y in [*sets, ("MNIST test PCA-50", *mnist_pca())]:
        for seed in (0, 1, 2):
            xs, ys = long_tailed(x, y, seed)
            result = compare(xs, ys)
            tailed.setdefault(name, []).append(result)
            rows.append(row(f"{name} long-tailed seed {seed} ({len(ys)} x {x.shape[1]}, largest / smallest "
                            f"{np.bincount(ys).max() / np.bincount(ys).min():.1f})", result))
    f = np.array(family)
    below = f[:, 2] < f[:, 0] - 0.005
    summary = [
        (f"Blob family ({len(f)} data sets): OTClustering at or above k-means' accuracy (within 0.005) on "
         f"{int((f[:, 2] >= f[:, 0] - 0.005).sum())}, mean accuracy {f[:, 2].mean():.3f} against {f[:, 0].mean():.3f}"
         f" (with 4 restarts {f[:, 5].mean():.3f}, at or above k-means on {int((f[:, 5] >= f[:, 0] - 0.005).sum())});"
         f" size error within 0.03 on {int((f[:, 3] <= 0.03).sum())} (k-means {int((f[:, 1] <= 0.03).sum())}); "
         f"fit time median {np.median(f[:, 4]):.2f} s, max {f[:, 4].max():.2f} s. Of the {int(below.sum())} below "
         f"k-means, the size-constrained objective prefers another partition to the classes on "
         f"{int((below & (f[:, 6] == 0)).sum())}."),
        "Real feature sets: " + "; ".join(f"{n} {r[2]:.3f} against k-means' {r[0]:.3f}" for n, r in
                                          zip(("wine", "breast cancer", "iris", "digits"), real)) + ".",
        "Long-tailed (mean over seeds 0-2, OTClustering / with 4 restarts / k-means; size error OTClustering / "
        "k-means): " + "; ".join(
            f"{n} {np.mean([r[2] for r in rs]):.3f} / {np.mean([r[5] for r in rs]):.3f} / "
            f"{np.mean([r[0] for r in rs]):.3f} (size error {np.mean([r[3] for r in rs]):.3f} / "
            f"{np.mean([r[1] for r in rs]):.3f})" for n, rs in tailed.items()) + "."]
    text = [__doc__.strip(), "", *summary, "",
            ("| data | k-means acc | k-means size error | OTClustering acc | OTClustering size error | fit s "
             "| acc, 4 restarts | objective prefers the classes |"),
            "|---|---|---|---|---|---|---|---|", *rows]
    out.write_text("\n".join(text) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main(REPO / "results" / "estimator_features.md")
