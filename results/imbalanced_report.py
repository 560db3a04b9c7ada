"""Issue #12's report: clustering MNIST subsets of known non-uniform class proportions.

    python results/imbalanced_report.py [--out results/imbalanced]

Reads the run records of results/run_imbalanced_cpu.sh and results/run_imbalanced2_cpu.sh (and, for
balanced MNIST, results/study_recipe, whose runs have the same command) and writes
``<out>/report.md`` (the table, the paired tests) and ``<out>/accuracy_vs_imbalance.png``. Sets or
methods whose runs are missing are left out and named. Every number comes from the records' final
metrics; the p-values are ``lit_otclust.experiments.compare``'s paired t-tests over seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import numpy as np

from lit_otclust.experiments import _select, compare

RECIPE = "results/study_recipe"
# method label -> (folder under the set, config, grid tags)
METHODS = {
    "soft k-means": ("uniform_w", "mnist_soft_kmeans", ""),
    "OT, uniform w": ("uniform_w", "mnist_ot", ""),
    "unbalanced OT (reg_m 0.2), uniform w": ("uniform_w", "mnist_ot", "reg_m=0.2"),
    "OT, true w, matched by size": ("true_w", "mnist_ot", "match_proportions=sizes"),
    "OT, true w, k-means order": ("true_w", "mnist_ot", "match_proportions=none"),
    "OT, misspecified w (+-30%), matched": ("misspecified_w", "mnist_ot", ""),
}
# data set -> (label, largest/smallest class, true proportions' smallest and largest entries)
SETS = {
    "balanced": ("10 digits, balanced", 1.0, (0.1, 0.1)),
    "geometric3": ("10 digits, geometric", 3.0, (0.0543, 0.163)),
    "geometric10": ("10 digits, geometric", 10.0, (0.0245, 0.2447)),
    "two_digits": ("digits 1 and 2, 20% / 80%", 4.0, (0.2, 0.8)),
}
COMPARISONS = [  # (a, b): the effect of a over b, paired by seed
    ("OT, true w, matched by size", "OT, uniform w"),
    ("OT, true w, matched by size", "soft k-means"),
    ("OT, true w, matched by size", "OT, true w, k-means order"),
    ("OT, misspecified w (+-30%), matched", "OT, true w, matched by size"),
    ("unbalanced OT (reg_m 0.2), uniform w", "OT, uniform w"),
    ("unbalanced OT (reg_m 0.2), uniform w", "soft k-means"),
]


def spec(out: Path, name: str, method: str) -> str:
    folder, config, tags = METHODS[method]
    if name == "balanced" and folder != "misspecified_w":
        # Balanced MNIST: the uniform w is the true w, and every size order matches it, so the true-w
        # runs are the uniform-w runs; those, soft k-means and unbalanced OT are the recipe study's.
        tags = "" if folder == "true_w" else tags
        return f"{RECIPE}:{config}" + (f":{tags}" if tags else "")
    return f"{out / name / folder}:{config}" + (f":{tags}" if tags else "")


def runs(out: Path, name: str, method: str) -> list[dict]:
    try:
        return _select(spec(out, name, method))
    except (ValueError, FileNotFoundError):
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/imbalanced")
    args = parser.parse_args()
    out = Path(args.out)
    lines = ["# Known non-uniform cluster sizes (issue #12)", "",
             "40-epoch proxy, no pre-training, seeds 0-4; val/* on the clustered images, each assigned to its "
             "nearest center (the paper's rule; cluster sizes are of that assignment). Written by "
             "`python results/imbalanced_report.py` from the run records.", "",
             "| data | largest/smallest | method | runs | acc mean ± sd | acc, potential rule | NMI | ARI | smallest cluster (true) | largest cluster (true) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    missing, acc = [], {}
    for name, (label, ratio, (w_min, w_max)) in SETS.items():
        for method in METHODS:
            rs = runs(out, name, method)
            if not rs:
                missing.append(f"{label} ({ratio:g}): {method}")
                continue
            f = {k: np.array([r["final"][k] for r in rs]) for k in ("val/acc", "val/nmi", "val/ari", "val/size_min", "val/size_max")}
            # argmin_k ||z - mu_k||^2 - g_k, g the running mean of the Sinkhorn cluster potentials: the rule that
            # keeps OT's sizes (soft k-means has g = 0, so it equals acc there and is not repeated).
            potential = (f"{np.mean([r['final']['val/acc_potential'] for r in rs]):.3f}"
                         if METHODS[method][1] == "mnist_ot" else "—")
            acc[name, method] = f["val/acc"]
            sd = f" ± {f['val/acc'].std(ddof=1):.3f}" if len(rs) > 1 else ""
            same = " (the uniform-w runs)" if name == "balanced" and METHODS[method][0] == "true_w" else ""
            lines.append(f"| {label} | {ratio:g} | {method}{same} | {len(rs)} | {f['val/acc'].mean():.3f}{sd} | "
                         f"{potential} | {f['val/nmi'].mean():.3f} | {f['val/ari'].mean():.3f} | "
                         f"{f['val/size_min'].mean():.3f} ({w_min:g}) | {f['val/size_max'].mean():.3f} ({w_max:g}) |")
    lines += ["", "Paired by seed (`lit_otclust.experiments.compare`: paired t-test over the seeds both have):", "",
              "| data | largest/smallest | a | b | mean a - b ± sd | paired p |", "|---|---|---|---|---|---|"]
    for name, (label, ratio, _) in SETS.items():
        for a, b in COMPARISONS:
            if (name, a) not in acc or (name, b) not in acc or spec(out, name, a) == spec(out, name, b):
                continue
            with contextlib.redirect_stdout(io.StringIO()):
                c = compare(spec(out, name, a), spec(out, name, b))
            lines.append(f"| {label} | {ratio:g} | {a} | {b} | {c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | {c['paired_p']:.3g} |")
        method = "OT, true w, matched by size"  # the same runs under the two assignment rules
        if (name, method) in acc and name != "balanced":
            with contextlib.redirect_stdout(io.StringIO()):
                c = compare(spec(out, name, method), spec(out, name, method), key="val/acc_potential", key_b="val/acc")
            lines.append(f"| {label} | {ratio:g} | {method}, potential rule | the same runs, nearest center | "
                         f"{c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | {c['paired_p']:.3g} |")
    if missing:
        lines += ["", "Not run yet: " + "; ".join(missing) + "."]
    lines += ["", "![accuracy against imbalance](accuracy_vs_imbalance.png)"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    figure(acc, out / "accuracy_vs_imbalance.png")


def figure(acc: dict[tuple[str, str], np.ndarray], path: Path) -> None:
    """(a) 10 digits: accuracy against largest/smallest, a line per method; (b) the two-digit set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.6, 1]})
    ten = [n for n in SETS if n != "two_digits"]
    for i, method in enumerate(METHODS):
        pts = [(SETS[n][1], acc[n, method]) for n in ten if (n, method) in acc]
        if pts:
            x = np.array([p[0] for p in pts]) * (1 + 0.02 * (i - 2.5))  # a small offset so error bars do not overlap
            left.errorbar(x, [a.mean() for _, a in pts], yerr=[a.std(ddof=1) if len(a) > 1 else 0 for _, a in pts],
                          marker="o", capsize=3, label=method, color=f"C{i}")
        if ("two_digits", method) in acc:
            a = acc["two_digits", method]
            right.errorbar([i], [a.mean()], yerr=[a.std(ddof=1) if len(a) > 1 else 0], marker="o", capsize=3, color=f"C{i}")
            right.scatter(np.full(len(a), i), a, s=8, color="gray", alpha=0.6)
    left.set_xscale("log")
    left.set_xticks([1, 3, 10], ["1", "3", "10"])
    left.set(xlabel="largest / smallest class", ylabel="accuracy (mean ± sd over seeds)",
             title="(a) 10 digits, geometric class proportions")
    left.legend(fontsize=7)
    right.set_xticks(range(len(METHODS)), [m.replace(", ", ",\n", 1) for m in METHODS], fontsize=6, rotation=30, ha="right")
    right.set(title="(b) digits 1 and 2, 20% / 80%", ylabel="accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
