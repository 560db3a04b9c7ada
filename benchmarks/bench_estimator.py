"""``OTClustering(proportions=w).fit(X)`` on features against the bare PyTorch loop doing the same work, and k-means.

    python -m benchmarks.bench_estimator --n 3000 30000 --dim 10 --clusters 5 --rounds 3 --threads 1

The data: K unit-variance Gaussian blobs in ``--dim`` dimensions, centers at a mean distance of about 3, shares
geometric with largest / smallest 10 (the blob family of ``scripts/estimator_features.py``). Timed, in turn each
round (:func:`benchmarks.harness.alternate`), in this process:

- ``estimator``: ``OTClustering(K, proportions=w, random_state=0).fit(X)`` with its defaults: no autoencoder on
  (n, d) features, size-constrained k-means (:func:`lit_otclust.clustering.constrained_kmeans`), input checks and
  the prediction of ``labels_`` included.
- ``bare``: the same work written the obvious way: the same restarts (sklearn's k-means++, one init each, w matched
  by size on even restarts, a seeded order on odd ones) and pairwise swap search, each Lloyd step's plan by plain
  log-domain Sinkhorn iterations from the previous step's g to the same tolerance (1e-6 on the column marginal),
  on the cost relative to the same scale.
- ``kmeans``: sklearn's ``KMeans(K, n_init=10)``, which does not know w (the floor on time).

Printed: per variant the median seconds over the rounds, their range, the accuracy (Hungarian) and the size error
of the last round, and the estimator's time over the bare loop's.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
import torch
from sklearn.cluster import KMeans

from benchmarks.harness import alternate, median, table
from lit_otclust import OTClustering
from lit_otclust.clustering import match_sizes
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.sinkhorn import squared_distances


def blobs(n: int, dim: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shares = np.array([10.0 ** (-j / (k - 1)) for j in range(k)])
    shares /= shares.sum()
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((k, dim))
    centers *= 3.0 / np.sqrt(2) / np.linalg.norm(centers, axis=1, keepdims=True).mean()
    y = np.repeat(np.arange(k), np.round(shares * n).astype(int))
    return centers[y] + rng.standard_normal((len(y), dim)), y, np.bincount(y) / len(y)


def bare_sinkhorn(cost: torch.Tensor, w: torch.Tensor, epsilon: float, g: torch.Tensor, tol: float = 1e-6,
                  max_iter: int = 100_000) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain log-domain Sinkhorn between 1/n on the rows and w on the columns, from g: the plan and g."""
    n = cost.shape[0]
    log_a, log_w = -np.log(n), w.log()
    for _ in range(max_iter):
        f = epsilon * (log_a - torch.logsumexp((g - cost) / epsilon, 1))
        g = epsilon * (log_w - torch.logsumexp((f[:, None] - cost) / epsilon, 0))
        plan = torch.exp((f[:, None] + g - cost) / epsilon)
        if float((plan.sum(0) - w).abs().sum()) < tol:
            break
    return plan, g


def bare_lloyd(x: torch.Tensor, w: torch.Tensor, mu: torch.Tensor, scale: torch.Tensor, epsilon: float,
               max_iter: int = 100, tol: float = 1e-6) -> tuple[float, torch.Tensor, torch.Tensor]:
    g = torch.zeros_like(w)
    for _ in range(max_iter):
        plan, g = bare_sinkhorn(squared_distances(x, mu) / scale, w, epsilon, g)
        new = plan.T @ x / plan.sum(0)[:, None]
        shift = float((new - mu).pow(2).sum(1).max() / scale)
        mu = new
        if shift < tol:
            break
    cost = squared_distances(x, mu)
    plan, g = bare_sinkhorn(cost / scale, w, epsilon, g)
    return float((plan * cost).sum()), mu, g * scale


def bare(x_np: np.ndarray, w_np: np.ndarray, n_init: int = 20, seed: int = 0, epsilon: float = 1e-2) -> np.ndarray:
    """Size-constrained k-means as :func:`lit_otclust.clustering.constrained_kmeans` computes it, the obvious way."""
    x, w = torch.as_tensor(x_np, dtype=torch.float64), torch.as_tensor(w_np, dtype=torch.float64)
    K, order, best = len(w), torch.Generator().manual_seed(seed), None
    for restart in range(n_init):
        km = KMeans(n_clusters=K, n_init=1, random_state=seed + restart, init="k-means++").fit(x_np)
        mu = torch.as_tensor(km.cluster_centers_)
        if restart % 2 == 0:
            sizes = torch.bincount(torch.as_tensor(km.labels_), minlength=K).double() / len(x)
            share = torch.argsort(match_sizes(sizes, w))
        else:
            share = torch.randperm(K, generator=order)
        scale = squared_distances(x, mu).min(1).values.mean()
        value, mu, g = bare_lloyd(x, w[share], mu, scale, epsilon)
        if best is None or value < best[0]:
            best = (value, mu, g, share, scale)
    value, mu, g, share, scale = best
    improved = True
    while improved:
        improved = False
        for a in range(K):
            for b in range(a + 1, K):
                if w[share[a]] == w[share[b]]:
                    continue
                swapped = share.clone()
                swapped[[a, b]] = share[[b, a]]
                trial = bare_lloyd(x, w[swapped], mu, scale, epsilon)
                if trial[0] < value * (1 - 1e-9):
                    (value, mu, g), share, improved = trial, swapped, True
    return share[(squared_distances(x, mu) - g).argmin(1)].numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[3000, 30000])
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}), torch {torch.__version__}")
    rows, k = [], args.clusters
    for n in args.n:
        x, y, w = blobs(n, args.dim, args.clusters)
        last: dict[str, np.ndarray] = {}

        def run(name: str, fit: Callable[[], np.ndarray], last: dict[str, np.ndarray] = last) -> float:
            start = time.perf_counter()
            last[name] = fit()
            return time.perf_counter() - start

        fits = {"estimator": lambda x=x, w=w: OTClustering(k, proportions=w.tolist(), random_state=0).fit(x).labels_,
                "bare": lambda x=x, w=w: bare(x, w),
                "kmeans": lambda x=x: KMeans(k, n_init=10, random_state=0).fit(x).labels_}
        seconds = alternate({name: (lambda name=name, fit=fit, run=run: run(name, fit)) for name, fit in fits.items()},
                            args.rounds)
        for name in fits:
            s = hungarian_accuracy(torch.as_tensor(np.asarray(last[name])), torch.as_tensor(y), args.clusters,
                                   args.clusters)
            ratio = f"{median(seconds['estimator']) / median(seconds['bare']):.2f}" if name == "estimator" else ""
            rows.append([f"{n} x {args.dim}, K={args.clusters}", name, f"{median(seconds[name]):.2f}",
                         f"{min(seconds[name]):.2f}-{max(seconds[name]):.2f}", f"{float(s['acc']):.3f}",
                         f"{float(s['size_error']):.3f}", ratio])
    table(["data", "variant", "median s", "range", "acc", "size error", "estimator / bare"], rows)


if __name__ == "__main__":
    main()
