"""Warm-started Sinkhorn solves as training runs them, on the embeddings of a trained checkpoint.

    python -m benchmarks.bench_warm_sinkhorn --ckpt runs/<run>/checkpoints/last.ckpt --data-dir ../shared/data

``bench_sinkhorn`` times cold solves on random costs. Training solves differently: each batch starts
from the previous batch's g, and late in training, with the embedding's scale grown far past epsilon,
the plans are nearly hard and the damped Newton steps do most of the work. This loads an MNIST
checkpoint of ``configs/mnist_ot*.yaml`` (the MLP autoencoder), embeds ``--batches`` seeded batches of
300 fitted images and solves them in sequence as ``DeepClustering.clustering_loss`` does (tolerance
and epsilon from the checkpoint's hyper-parameters, warm start from the checkpoint's ``g_last``),
1 thread. Prints the median time, iterations (Sinkhorn + Newton) and Cholesky factorisations per
solve. Compare code versions by running it at each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from lit_otclust.data import MNISTDataModule
from lit_otclust.sinkhorn import sinkhorn, squared_distances
from lit_otclust.system import DeepClustering


def trained_costs(ckpt: str, x: torch.Tensor, batches: int) -> tuple[DeepClustering, list[torch.Tensor]]:
    """A checkpoint's module (CPU, eval mode) and the (300, K) costs of its embedding of ``batches`` seeded batches
    of 300 samples of ``x``, the problems training solves late in a run."""
    module = DeepClustering.load_from_checkpoint(ckpt, map_location="cpu").eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        return module, [squared_distances(module.embed(x[idx]), module.centers)
                        for idx in torch.randperm(len(x), generator=generator)[: 300 * batches].split(300)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the batches; the median pass is kept")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = MNISTDataModule(args.data_dir, download=False, fit_split="all")
    data.setup()
    module, costs = trained_costs(args.ckpt, data.fit_set.x, args.batches)
    hp = module.hparams
    factorisations = [0]
    cholesky_ex = torch.linalg.cholesky_ex

    def counted(*a, **k):
        factorisations[0] += 1
        return cholesky_ex(*a, **k)

    torch.linalg.cholesky_ex = counted
    passes = []
    for _ in range(args.repeats):
        g, times, iters, chols = module.g_last.clone(), [], [], []
        for cost in costs:
            factorisations[0] = 0
            start = time.perf_counter()
            res = sinkhorn(cost, b=module.proportions, epsilon=hp.epsilon, tol=hp.sinkhorn_tol,
                           max_iter=hp.sinkhorn_max_iter, g_init=g, warn=False)
            times.append(time.perf_counter() - start)
            iters.append(res.n_iter)
            chols.append(factorisations[0])
            g = res.g
        passes.append((statistics.median(times), statistics.median(iters), statistics.median(chols)))
    torch.linalg.cholesky_ex = cholesky_ex
    ms, it, ch = sorted(passes)[len(passes) // 2]
    print(f"{args.ckpt}: epoch {torch.load(args.ckpt, map_location='cpu', weights_only=False)['epoch']}, "
          f"cost max {costs[0].max().item():.1f}, epsilon {hp.epsilon:g}, tol {hp.sinkhorn_tol:g}")
    print(f"  {args.batches} warm-started solves, median: {1e3 * ms:.2f} ms, {it:.0f} iterations, "
          f"{ch:.0f} Cholesky factorisations (median of {args.repeats} passes)")


if __name__ == "__main__":
    main()
