"""``OTClustering(proportions=w).fit(X)`` on features against k-means, mini-batch k-means, k-means-constrained, faiss
and a bare PyTorch loop doing size-constrained k-means the obvious way.

    python -m benchmarks.bench_estimator --n 10000 100000 1000000 --dim 20 --clusters 10 --restarts 4 --threads 1

The data: K unit-variance Gaussian blobs in ``--dim`` dimensions, centers at a mean distance of about 3, shares
geometric with largest / smallest 10 (``--uniform``: equal shares, which k-means-constrained can be told). Timed, in
turn each round (:func:`benchmarks.harness.alternate`), in this process, all with ``--restarts`` restarts:

- ``estimator``: ``OTClustering(K, proportions=w, kmeans_n_init=restarts, random_state=0).fit(X)`` (float32, no
  autoencoder on (n, d) features: :func:`lit_otclust.clustering.constrained_kmeans`), input checks and the
  prediction of ``labels_`` included.
- ``bare``: size-constrained k-means as a user would write it in PyTorch, float32: each restart from sklearn's
  k-means (one k-means++ init) with w matched by size, Lloyd's iterations on all rows, each plan by plain
  log-domain Sinkhorn iterations (logsumexp over an (n, K) cost) warm-started from the last step's g to a marginal
  error of 1e-4, the same epsilon (0.01 of the mean squared distance to the nearest starting center), to a center
  shift of 1e-4 of it; the restart of least transport cost kept; labels argmin_k C - g. Up to ``--bare-max-n``.
- ``kmeans``: sklearn's ``KMeans(K, n_init=restarts)``; ``minibatch``: ``MiniBatchKMeans(K, n_init=restarts)``;
  ``faiss``: ``faiss.Kmeans(d, K, nredo=restarts)`` (20 iterations, its default); none of them told w.
- ``kmc``: k-means-constrained's ``KMeansConstrained(K, size_min, size_max, n_init=restarts)`` (min-cost flow)
  with every size n / K, with ``--uniform`` only (it takes one size bound for all clusters) and up to
  ``--kmc-max-n``.

A competitor whose package is not installed is left out with a printed note; ``--only NAME ...`` times those alone
(``benchmarks/gpu_check.sh estimator``: the estimator at 10^7 rows on a GPU beside MiniBatchKMeans and faiss).
Printed: per variant the median seconds over the rounds, their range, and of the last round the accuracy
(Hungarian), the size error (the largest |cluster share - matched class share|, lit_otclust.metrics) and the
objective, the mean squared distance of the points to the mean of their cluster; ``--plot PATH`` draws the medians
against n, log-log.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from collections.abc import Callable

import numpy as np
import torch
from sklearn.cluster import KMeans, MiniBatchKMeans

from benchmarks.harness import alternate, median, table
from lit_otclust import OTClustering
from lit_otclust.clustering import match_sizes
from lit_otclust.metrics import hungarian_accuracy


def blobs(n: int, dim: int, k: int, seed: int = 0, uniform: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shares = np.ones(k) if uniform else np.array([10.0 ** (-j / (k - 1)) for j in range(k)])
    shares /= shares.sum()
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((k, dim))
    centers *= 3.0 / np.sqrt(2) / np.linalg.norm(centers, axis=1, keepdims=True).mean()
    y = np.repeat(np.arange(k), np.round(shares * n).astype(int))
    x = (centers[y] + rng.standard_normal((len(y), dim))).astype(np.float32)
    return x, y, np.bincount(y, minlength=k) / len(y)


def bare(x_np: np.ndarray, w_np: np.ndarray, restarts: int, seed: int = 0, epsilon: float = 1e-2,
         max_iter: int = 100) -> np.ndarray:
    """Size-constrained k-means the obvious way in PyTorch (the module docstring's ``bare``): labels (n,)."""
    x, w = torch.as_tensor(x_np), torch.as_tensor(w_np, dtype=torch.float32)
    K, log_a, log_w = len(w), -np.log(len(x)), w.log()
    best = None
    for restart in range(restarts):
        km = KMeans(n_clusters=K, n_init=1, random_state=seed + restart).fit(x_np)
        mu = torch.as_tensor(km.cluster_centers_, dtype=torch.float32)
        share = torch.argsort(match_sizes(torch.as_tensor(np.bincount(km.labels_, minlength=K) / len(x)),
                                          w.double()))
        target, log_target = w[share], log_w[share]
        scale = float(torch.cdist(x, mu).pow(2).min(1).values.mean())
        eps, g = epsilon * scale, torch.zeros(K)
        for _ in range(max_iter):
            cost = torch.cdist(x, mu).pow(2)  # (n, K)
            for _ in range(1000):  # Sinkhorn from the last g
                f = eps * (log_a - torch.logsumexp((g - cost) / eps, 1))
                g = eps * (log_target - torch.logsumexp((f[:, None] - cost) / eps, 0))
                plan = torch.exp((f[:, None] + g - cost) / eps)  # (n, K)
                if float((plan.sum(1) - 1 / len(x)).abs().sum()) < 1e-4:
                    break
            new = plan.T @ x / plan.sum(0)[:, None]
            shift = float((new - mu).pow(2).sum(1).max()) / scale
            mu = new
            if shift < 1e-4:
                break
        value = float((plan * cost).sum())
        if best is None or value < best[0]:
            best = (value, (torch.cdist(x, mu).pow(2) - g).argmin(1))
    return best[1].numpy()


def objective(x: np.ndarray, labels: np.ndarray, k: int) -> float:
    """The mean squared distance of the points to the mean of their cluster."""
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, labels, x)
    counts = np.bincount(labels, minlength=k)
    means = sums / np.maximum(counts, 1)[:, None]
    return float(((x - means[labels]) ** 2).sum(1).mean())


def competitors(args: argparse.Namespace, n: int, k: int, d: int) -> dict[str, Callable[[np.ndarray, np.ndarray],
                                                                                        np.ndarray]]:
    r = args.restarts
    fits: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
        "estimator": lambda x, w: OTClustering(k, proportions=w.tolist(), kmeans_n_init=r,
                                               random_state=0).fit(x).labels_,
        "kmeans": lambda x, w: KMeans(k, n_init=r, random_state=0).fit(x).labels_,
        "minibatch": lambda x, w: MiniBatchKMeans(k, n_init=r, random_state=0).fit(x).labels_}
    if n <= args.bare_max_n:
        fits["bare"] = lambda x, w: bare(x, w, r)
    if importlib.util.find_spec("faiss") is None:
        print("faiss not installed: left out (pip install faiss-cpu)")
    else:
        import faiss

        def faiss_fit(x: np.ndarray, w: np.ndarray) -> np.ndarray:
            km = faiss.Kmeans(d, k, nredo=r, seed=1234, verbose=False)
            km.train(x)
            return km.index.search(x, 1)[1][:, 0]
        fits["faiss"] = faiss_fit
    if args.uniform and n <= args.kmc_max_n:
        if importlib.util.find_spec("k_means_constrained") is None:
            print("k-means-constrained not installed: left out (pip install k-means-constrained)")
        else:
            from k_means_constrained import KMeansConstrained
            fits["kmc"] = lambda x, w: KMeansConstrained(k, size_min=n // k, size_max=-(-n // k), n_init=r,
                                                         random_state=0).fit(x).labels_
    return {name: fit for name, fit in fits.items() if not args.only or name in args.only}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[3000, 30000])
    parser.add_argument("--dim", type=int, default=20)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--uniform", action="store_true", help="equal shares (k-means-constrained runs)")
    parser.add_argument("--bare-max-n", type=int, default=100_000)
    parser.add_argument("--kmc-max-n", type=int, default=20_000)
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="time these variants alone (estimator, kmeans, minibatch, bare, faiss, kmc)")
    parser.add_argument("--plot", default=None, help="a .png of the median seconds against n, log-log")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}), torch {torch.__version__}, "
          f"restarts {args.restarts}")
    rows, k, curves = [], args.clusters, {}
    for n in args.n:
        x, y, w = blobs(n, args.dim, k, uniform=args.uniform)
        last: dict[str, np.ndarray] = {}

        def run(name: str, fit: Callable[[], np.ndarray], last: dict[str, np.ndarray] = last) -> float:
            start = time.perf_counter()
            last[name] = np.asarray(fit())
            return time.perf_counter() - start

        fits = competitors(args, n, k, args.dim)
        seconds = alternate({name: (lambda name=name, fit=fit, x=x, w=w: run(name, lambda: fit(x, w)))
                             for name, fit in fits.items()}, args.rounds)
        for name in fits:
            s = hungarian_accuracy(torch.as_tensor(last[name]).long(), torch.as_tensor(y), k, k)
            curves.setdefault(name, []).append((n, median(seconds[name])))
            ratio = (f"{median(seconds['estimator']) / median(seconds[name]):.2f}"
                     if name != "estimator" and "estimator" in fits else "")
            rows.append([f"{n} x {args.dim}, K={k}", name, f"{median(seconds[name]):.3f}",
                         f"{min(seconds[name]):.3f}-{max(seconds[name]):.3f}", f"{float(s['acc']):.3f}",
                         f"{float(s['size_error']):.3f}", f"{objective(x, last[name], k):.4f}", ratio])
    table(["data", "variant", "median s", "range", "acc", "size error", "objective", "estimator / it"], rows)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4.5, 3.2), dpi=100)
        for name, points in curves.items():
            ax.loglog(*zip(*points), marker="o", label=name)
        ax.set_xlabel("n")
        ax.set_ylabel("fit seconds")
        ax.set_title(f"d={args.dim}, K={k}, {args.restarts} restarts, {args.threads} thread(s)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
