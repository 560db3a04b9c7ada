"""How many points must a balanced plan send off their nearest center, from batch noise alone?

    python results/plan_noise.py results/figures_mnist_ot_seed0/predictions.csv.gz

Reads a ``predict`` output (each image's nearest center) and draws random batches of m images, as
training does. A plan with column sums w (here 1/K) must move at least
(1/2) sum_k |n_k / m - w_k| of a batch's mass off the nearest centers, where n_k counts the batch's
images whose nearest center is k. Prints that lower bound (mean over batches) for the learned
partition, and for an ideal partition whose clusters are exactly balanced (the sampling noise of a
batch alone), beside what training logged (``train/plan_moved``).
"""

from __future__ import annotations

import argparse
import csv
import gzip

import numpy as np


def forced_move(clusters: np.ndarray, num_clusters: int, batch: int, batches: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(batches):
        n = np.bincount(rng.choice(clusters, batch, replace=False), minlength=num_clusters)
        total += 0.5 * np.abs(n / batch - 1.0 / num_clusters).sum()
    return total / batches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("predictions")
    p.add_argument("--batch", type=int, default=300)
    p.add_argument("--batches", type=int, default=2000)
    args = p.parse_args()
    opener = gzip.open if args.predictions.endswith(".gz") else open
    with opener(args.predictions, "rt") as fh:
        clusters = np.array([int(row["cluster"]) for row in csv.DictReader(fh)])
    K = int(clusters.max()) + 1
    sizes = np.bincount(clusters, minlength=K) / len(clusters)
    balanced = np.repeat(np.arange(K), len(clusters) // K)
    print(f"{len(clusters)} images, K = {K}, nearest-center cluster sizes {np.round(sizes, 3).tolist()}")
    print(f"whole-set imbalance (1/2) sum |size - 1/K| = {0.5 * np.abs(sizes - 1 / K).sum():.3f}")
    print(f"forced move per batch of {args.batch}, learned partition: {forced_move(clusters, K, args.batch, args.batches, 0):.3f}")
    print(f"forced move per batch of {args.batch}, exactly balanced partition: {forced_move(balanced, K, args.batch, args.batches, 0):.3f}")
    for m in (1000, 3000):
        print(f"forced move per batch of {m}, learned partition: {forced_move(clusters, K, m, args.batches // 4, 0):.3f}")


if __name__ == "__main__":
    main()
