"""Which classes merge or split over training, OT against soft k-means of the same seed (issue #14).

Reads the confusion counts the runs' records hold (``record["confusion"]``, drawn every 10 epochs by
``ClusterFigures``) and prints, per seed, method and epoch, the accuracy and every class b of which at
least ``--share`` of the images sit in the cluster matched to another class a, as ``b>a 45%``: the images of
b that accuracy counts as wrong because they share a's cluster.

    python results/confusion_report.py --out results/protocol > results/protocol/confusion.md
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import numpy as np

from lit_otclust.experiments import load


def confused(table: dict, share: float) -> tuple[float, list[str]]:
    """(accuracy, ``b>a NN%`` for each class b with >= share of its images in the cluster matched to a != b)."""
    counts = np.array(table["counts"])  # (K, C), row i: cluster table["cluster"][i]
    matched = np.array(table["matched_class"])  # each row's class, -1 if unmatched
    per_class = counts.sum(0)
    acc = sum(counts[i, c] for i, c in enumerate(matched) if c >= 0) / counts.sum()
    pairs = []
    for i, a in enumerate(matched):
        for b in range(counts.shape[1]):
            frac = counts[i, b] / max(per_class[b], 1)
            if b != a and frac >= share:
                pairs.append((frac, f"{b}>{a if a >= 0 else '-'} {frac:.0%}"))
    return acc, [text for _, text in sorted(pairs, reverse=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/protocol", help="the sweep's folder of records")
    parser.add_argument("--methods", nargs="+", default=["ot", "soft_kmeans"])
    parser.add_argument("--share", type=float, default=0.15, help="a class's share in another class's cluster to list")
    parser.add_argument("--epochs", type=int, nargs="+", default=[9, 49, 99, 199], help="0-based epochs to show")
    args = parser.parse_args()
    runs = defaultdict(dict)  # seed -> method -> record
    for record in load(args.out):
        if record.get("confusion") and not record["grid"] and record["method"] in args.methods:
            runs[record["seed"]][record["method"]] = record
    print(f"Output of `python results/confusion_report.py {' '.join(sys.argv[1:])}`: for each class b with at least "
          f"{args.share:.0%} of its images in the cluster matched to another class a, `b>a share` "
          "(`-`: a cluster matched to no class). Accuracy is the Hungarian accuracy of the same counts.\n")
    print("| seed | method | " + " | ".join(f"epoch {e}" for e in args.epochs) + " |")
    print("|---|---|" + "---|" * len(args.epochs))
    for seed in sorted(runs):
        for method in args.methods:
            record = runs[seed].get(method)
            if record is None:
                continue
            cells = []
            for epoch in args.epochs:
                table = record["confusion"].get(str(epoch))
                if table is None:
                    cells.append("—")
                    continue
                acc, pairs = confused(table, args.share)
                cells.append(f"{acc:.3f}: " + (", ".join(pairs) or "clean"))
            print(f"| {seed} | {method} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
