"""Studies run and reported: the paper's Table 1 and Figures 1-2, and the studies of RESULTS.md.

    python -m lit_otclust.experiments run configs/studies/protocol.yaml [--jobs 2] [--threads 1] [--dry-run]
    python -m lit_otclust.experiments run configs/studies/paper_protocol.yaml --launcher slurm
    python -m lit_otclust.experiments report configs/studies/protocol.yaml     # or: report --out results/protocol
    python -m lit_otclust.experiments compare --a results/protocol:mnist_ot --b results/protocol:mnist_soft_kmeans
    python -m lit_otclust.experiments claims    # the paper's p-values recomputed from its Table 1, beside ours

``run`` fits every run of a study file (:mod:`lit_otclust.studies`) that has no record yet: ``--jobs`` at a time
(``--jobs`` per GPU where several are visible), each on ``--threads`` CPU threads; ``--dry-run`` prints each
run's command and starts nothing; ``--launcher slurm`` submits the runs left as one SLURM job array. ``report``
renders the study's records into its folder: per folder of records a table beside the paper's numbers with Welch
t-tests (``table.md``), accuracy per epoch (``figure1_<data>.png``) and, with a grid key, accuracy against it
(``figure2_<data>.png`` and ``.md``); and what the study file's ``report:`` asks for (:func:`report`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from lit_otclust.studies import (CURVE_KEYS, Study, dry_run, load_study, read_confusions, read_curves,  # noqa: F401
                                 run_local, run_named, submit_slurm)

# Table 1 of the paper: mean, std, min, max of the accuracy over 50 runs of 200 epochs.
PAPER = {
    "mnist": {"kmeans": (0.513, None, None, None), "ae_kmeans": (0.801, 0.025, 0.765, 0.912),
              "soft_kmeans": (0.810, 0.033, 0.677, 0.883), "soft_kmeans_p": (0.837, 0.032, 0.781, 0.923),
              "ot": (0.851, 0.032, 0.771, 0.932), "ot_p": (0.846, 0.040, 0.759, 0.928)},
    "cifar10": {"kmeans": (0.206, None, None, None), "ae_kmeans": (0.237, 0.005, 0.230, 0.259),
                "soft_kmeans": (0.239, 0.008, 0.227, 0.257), "soft_kmeans_p": (0.243, 0.010, 0.227, 0.261),
                "ot": (0.243, 0.007, 0.232, 0.260), "ot_p": (0.244, 0.009, 0.230, 0.266)},
}
# Table 1's rows in order; soft k-means in DKM's form (the paper's soft k-means, DKM_FORM) beside the soft-min form.
METHODS = ["kmeans", "ae_kmeans", "soft_kmeans", "soft_kmeans_dkm", "soft_kmeans_p", "soft_kmeans_dkm_p", "ot", "ot_p"]
# The paper's Welch t-tests: (a, b) pairs it reports p-values for; then OT against DKM's form of soft k-means.
COMPARISONS = [("ot", "soft_kmeans"), ("ot_p", "soft_kmeans_p"), ("ot_p", "ot"), ("soft_kmeans_p", "soft_kmeans"),
               ("ot", "soft_kmeans_dkm"), ("ot_p", "soft_kmeans_dkm_p")]
BASELINES = "results/kmeans_raw"  # `python -m lit_otclust.baselines` records: k-means on raw pixels


def _tags(grid: dict[str, str]) -> list[str]:
    """``key=value`` per grid setting, by the key's last component: ``model.epsilon`` -> ``epsilon=0.1``."""
    return [f"{k.split('.')[-1]}={v}" for k, v in sorted(grid.items())]


def load(out: str | Path) -> list[dict]:
    """The run records in folder ``out``."""
    return [json.loads(p.read_text()) for p in sorted(Path(out).glob("*.json"))]


def _group(records: list[dict], key: str = "val/acc") -> dict[tuple, list[float]]:
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        if key in r["final"]:
            groups[(r["dataset"], r["method"], json.dumps(r["grid"], sort_keys=True))].append(r["final"][key])
    return groups


def table(out: str | Path, key: str = "val/acc", baselines: str | None = BASELINES) -> str:
    """Markdown: per data set and method, mean (± std) and [min, max] beside the paper, then Welch t-tests.

    Args:
        out: a folder of run records.
        key: the metric to tabulate (``val/acc``: accuracy on the fitted samples, the paper's).
        baselines: a folder of ``python -m lit_otclust.baselines`` JSON outputs (k-means on pixels), or None.
    """
    records = load(out)
    groups = _group(records, key)
    overrides = [{f"{k}={v}" for k, v in r["fixed"].items()} for r in records]
    every_run = set.intersection(*overrides) if overrides else set()
    fixed = sorted(every_run) + [f"{o} (some runs)" for o in sorted(set().union(*overrides) - every_run)]
    datasets = {r["dataset"] for r in records}
    if baselines and Path(baselines).is_dir():
        for p in sorted(Path(baselines).glob("*.json")):
            b = json.loads(p.read_text())
            if b["dataset"] in datasets or not records:
                groups[(b["dataset"], "kmeans", "{}")].append(b["acc"])
    lines = ["| data | method | settings | runs | ours: mean (± std) | ours: [min, max] | paper: mean (± std) | paper: [min, max] |",
             "|---|---|---|---|---|---|---|---|"]
    for (ds, method, grid), accs in sorted(groups.items(), key=lambda kv: (kv[0][0], METHODS.index(kv[0][1]) if kv[0][1] in METHODS else 99, kv[0][2])):
        a = np.array(accs)
        paper_name = {dkm: skm for skm, dkm in DKM_FORM.items()}.get(method, method)  # the paper's is DKM's
        pm, ps, pmin, pmax = PAPER.get(ds, {}).get(paper_name, (None,) * 4)
        paper_mean = "" if pm is None else f"{pm:.3f}" + ("" if ps is None else f" (± {ps:.3f})")
        paper_range = "" if pmin is None else f"[{pmin:.3f}, {pmax:.3f}]"
        std = f" (± {a.std(ddof=1):.3f})" if len(a) > 1 else ""
        settings = ", ".join(_tags(json.loads(grid)))
        lines.append(f"| {ds} | {method} | {settings} | {len(a)} | {a.mean():.3f}{std} | [{a.min():.3f}, {a.max():.3f}] | {paper_mean} | {paper_range} |")
    lines += ["", "Welch's t-test (scipy.stats.ttest_ind, equal_var=False) on the final accuracies:", "",
              "| data | settings | a | b | mean a - mean b | p-value |", "|---|---|---|---|---|---|"]
    for (ds, method, grid), accs in sorted(groups.items()):
        for a_name, b_name in COMPARISONS:
            other = groups.get((ds, b_name, grid))
            if method == a_name and other and len(accs) > 1 and len(other) > 1:
                t = stats.ttest_ind(accs, other, equal_var=False)
                settings = "" if grid == "{}" else grid
                lines.append(f"| {ds} | {settings} | {a_name} | {b_name} | {np.mean(accs) - np.mean(other):+.3f} | {t.pvalue:.3g} |")
    lines += ["", *_other_metrics(records)]
    if fixed:
        lines = [f"Overrides given to the runs: {', '.join(fixed)}.", "", *lines]
    return "\n".join(lines) + "\n"


OTHER_METRICS = {"val/acc": "acc", "val/acc_potential": "acc, potential rule", "val/nmi": "NMI", "val/ari": "ARI",
                 "heldout/acc": "acc, test split", "val/size_min": "smallest cluster", "val/size_max": "largest cluster"}


def _other_metrics(records: list[dict]) -> list[str]:
    """Markdown rows: per data set, method and settings, the mean over seeds of every logged metric."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["dataset"], r["method"], ", ".join(_tags(r["grid"])))].append(r)
    lines = ["Mean over seeds of the other final metrics (cluster sizes: fractions of the clustered images):", "",
             "| data | method | settings | " + " | ".join(OTHER_METRICS.values()) + " | minutes per run |",
             "|---|---|---|" + "---|" * (len(OTHER_METRICS) + 1)]
    for (ds, method, settings), runs in sorted(groups.items()):
        cells = []
        for key in OTHER_METRICS:
            # The potential rule is OT's: other methods log it with g = 0, a copy of acc.
            values = [r["final"][key] for r in runs if key in r["final"]
                      and (key != "val/acc_potential" or method.startswith("ot"))]
            cells.append(f"{np.mean(values):.3f}" if values else "—")
        minutes = np.mean([r["seconds"] for r in runs]) / 60
        lines.append(f"| {ds} | {method} | {settings} | {' | '.join(cells)} | {minutes:.0f} |")
    return lines


def _select(spec: str) -> list[dict]:
    """Runs named by ``DIR:CONFIG[:key=value,...]`` (grid tags as in run names; none: the runs without a grid)."""
    folder, _, rest = spec.partition(":")
    config, _, tags = rest.partition(":")
    if not config:
        raise ValueError(f"{spec!r} must look like DIR:CONFIG[:key=value,...], e.g. results/study_recipe:mnist_ot")
    want = sorted(t for t in tags.split(",") if t)
    runs = [r for r in load(folder) if r["config"] == config and sorted(_tags(r["grid"])) == want]
    if not runs:
        raise ValueError(f"no runs of {config} with settings {want or 'none'} in {folder}")
    return runs


def _value(record: dict, key: str, epoch: int | None) -> float:
    """``key`` at the end of the run, or at ``epoch`` of its curves (a shorter proxy of a longer run)."""
    if epoch is None:
        return record["final"][key]
    curves = record["curves"]
    if str(epoch) not in curves:
        raise ValueError(f"{record['name']} has no epoch {epoch} (it has {len(curves)} epochs)")
    return curves[str(epoch)][key]


def paired_power(delta: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level ``alpha`` to detect a mean difference ``delta`` with ``n``
    pairs whose differences have standard deviation ``sd``: P(|T| > t_{1 - alpha/2, n - 1}) for T noncentral t
    with n - 1 degrees of freedom and noncentrality delta sqrt(n) / sd."""
    df, nc = n - 1, delta * np.sqrt(n) / sd
    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def compare(a: str, b: str, key: str = "val/acc", epoch: int | None = None, key_b: str | None = None,
            against: float | None = None, quiet: bool = False) -> dict[str, float]:
    """Effect of a over b, paired by seed: mean difference ± its std, its 95% confidence interval (t), the
    paired t-test and Welch p-values.

    Args:
        a, b: ``DIR:CONFIG[:key=value,...]``, e.g. ``results/study_recipe:mnist_ot:reg_m_start=0.01``.
        key: the metric. epoch: compare at this epoch of the curves instead of the last one.
        key_b: b's metric, if not ``key`` (e.g. two assignment rules of the same runs).
        against: a difference claimed elsewhere (e.g. the paper's +0.041): also the paired t-test of
            "the mean difference is ``against``" (``against_p``), and the power these pairs had to detect a
            difference that large at the 5% level, given their spread (``against_power``, :func:`paired_power`).
        quiet: return the numbers without printing the sentence that states them.
    """
    runs_a = {r["seed"]: _value(r, key, epoch) for r in _select(a)}
    runs_b = {r["seed"]: _value(r, key_b or key, epoch) for r in _select(b)}
    seeds = sorted(set(runs_a) & set(runs_b))
    diff = np.array([runs_a[s] - runs_b[s] for s in seeds])
    paired = stats.ttest_rel([runs_a[s] for s in seeds], [runs_b[s] for s in seeds]) if len(seeds) > 1 else None
    ci = paired.confidence_interval(0.95) if paired is not None else (np.nan, np.nan)
    out = {"n_paired": len(seeds), "mean_a": float(np.mean(list(runs_a.values()))),
           "mean_b": float(np.mean(list(runs_b.values()))), "paired_diff": float(diff.mean()) if len(diff) else np.nan,
           "paired_sd": float(diff.std(ddof=1)) if len(diff) > 1 else np.nan,
           "paired_p": float(paired.pvalue) if paired is not None else np.nan,
           "paired_ci_low": float(ci[0]), "paired_ci_high": float(ci[1]),
           "welch_p": float(stats.ttest_ind(list(runs_a.values()), list(runs_b.values()), equal_var=False).pvalue)
           if min(len(runs_a), len(runs_b)) > 1 else np.nan}
    if against is not None and len(diff) > 1:
        out["against"] = against
        out["against_p"] = float(stats.ttest_1samp(diff, popmean=against).pvalue)
        out["against_power"] = paired_power(against, out["paired_sd"], len(diff))
    if not quiet:
        at = "final" if epoch is None else f"epoch {epoch}"
        print(f"{key}{'' if key_b in (None, key) else ' vs ' + key_b} at {at}: a {out['mean_a']:.3f} ({len(runs_a)} runs), b {out['mean_b']:.3f} ({len(runs_b)} runs); "
              f"paired over seeds {seeds}: {out['paired_diff']:+.3f} ± {out['paired_sd']:.3f} (95% CI "
              f"[{out['paired_ci_low']:+.3f}, {out['paired_ci_high']:+.3f}]), p = {out['paired_p']:.3g}; "
              f"Welch p = {out['welch_p']:.3g}")
        if "against" in out:
            print(f"against a difference of {against:+.3f}: paired p = {out['against_p']:.3g}; these {len(diff)} pairs had "
                  f"power {out['against_power']:.2f} to detect it at the 5% level")
    return out


def compare_table(pairs: list[dict[str, Any]]) -> str:
    """Markdown of :func:`compare` for each ``{a, b[, key, epoch, key_b, against]}`` of ``pairs``, paired by seed."""
    lines = ["Paired by seed (`experiments.compare`): mean difference a - b ± its sd over the pairs, its 95% CI (t), "
             "the paired t-test and Welch's p.", "",
             "| a | b | metric | at | pairs | mean a | mean b | a - b ± sd | 95% CI | paired p | Welch p |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    claims = []  # the tests of a difference claimed elsewhere
    for pair in pairs:
        key = pair.get("key", "val/acc") + (f" vs {pair['key_b']}" if pair.get("key_b") else "")
        at = "final" if pair.get("epoch") is None else f"epoch {pair['epoch']}"
        try:
            c = compare(**pair, quiet=True)
        except ValueError as missing:  # a study's report is written while its runs land
            lines.append(f"| `{pair['a']}` | `{pair['b']}` | {key} | {at} | 0 | {missing} | | | | | |")
            continue
        lines.append(f"| `{pair['a']}` | `{pair['b']}` | {key} | {at} | {c['n_paired']} | {c['mean_a']:.3f} | "
                     f"{c['mean_b']:.3f} | {c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | "
                     f"[{c['paired_ci_low']:+.3f}, {c['paired_ci_high']:+.3f}] | {c['paired_p']:.3g} | "
                     f"{c['welch_p']:.3g} |")
        if "against" in c:
            claims.append(f"- `{pair['a']}` - `{pair['b']}` against a difference of {c['against']:+.3f}: paired p = "
                          f"{c['against_p']:.3g}; these {c['n_paired']} pairs had power {c['against_power']:.2f} to "
                          "detect it at the 5% level.")
    return "\n".join(lines + ([""] + claims if claims else [])) + "\n"


# ---- the paper's own statistics ----------------------------------------------------------------------------------

# The p-values of the paper's Welch t-tests over its 50 runs a column (its Section 4, beside Table 1), as printed.
PAPER_P = {
    "mnist": {("ot", "soft_kmeans"): "1e-12", ("ot_p", "soft_kmeans_p"): "0.10", ("ot_p", "ot"): "> 0.2",
              ("soft_kmeans_p", "soft_kmeans"): "< 0.05"},
    "cifar10": {("ot", "soft_kmeans"): "0.0067", ("ot_p", "soft_kmeans_p"): "0.33", ("ot_p", "ot"): "> 0.2",
                ("soft_kmeans_p", "soft_kmeans"): "< 0.05"},
}
PAPER_RUNS = 50
# The paper's soft k-means is DKM (Fard et al.), whose loss is the expected distance under the soft assignment;
# configs/mnist_soft_kmeans_dkm*.yaml train that form (model.soft_kmeans_form: expected), ours the soft-min.
DKM_FORM = {"soft_kmeans": "soft_kmeans_dkm", "soft_kmeans_p": "soft_kmeans_dkm_p"}


def paper_pvalues(runs: int = PAPER_RUNS, rounding: float = 0.0005) -> list[dict[str, Any]]:
    """The paper's Welch t-tests recomputed from its own Table 1 (:data:`PAPER`: mean and std, ``runs`` a column)
    with ``scipy.stats.ttest_ind_from_stats(..., equal_var=False)``, for each comparison it reports a p-value for
    (:data:`PAPER_P`).

    Returns one dict per comparison: ``dataset``, ``a``, ``b``, ``reported`` (the paper's p, as printed), ``diff``
    (mean a - mean b), ``t``, ``p_two`` (two-sided), ``p_one`` (one-sided, a > b), and ``p_two_range``,
    ``p_one_range``: the least and largest p over every mean and std within ``rounding`` of the printed value
    (Table 1 prints 3 decimals; a 5-point grid on each of the four), so a reported p outside its range cannot come
    from Table 1's numbers by that test.
    """
    rows = []
    for dataset, reported in PAPER_P.items():
        for (a, b), text in reported.items():
            (ma, sa), (mb, sb) = PAPER[dataset][a][:2], PAPER[dataset][b][:2]
            two = stats.ttest_ind_from_stats(ma, sa, runs, mb, sb, runs, equal_var=False)
            one = stats.ttest_ind_from_stats(ma, sa, runs, mb, sb, runs, equal_var=False, alternative="greater")
            grid = np.meshgrid(*[np.linspace(v - rounding, v + rounding, 5) for v in (ma, sa, mb, sb)])
            ga, gsa, gb, gsb = (g.ravel() for g in grid)
            p_two = stats.ttest_ind_from_stats(ga, gsa, runs, gb, gsb, runs, equal_var=False).pvalue
            p_one = stats.ttest_ind_from_stats(ga, gsa, runs, gb, gsb, runs, equal_var=False,
                                               alternative="greater").pvalue
            rows.append({"dataset": dataset, "a": a, "b": b, "reported": text, "diff": ma - mb,
                         "t": float(two.statistic), "p_two": float(two.pvalue), "p_one": float(one.pvalue),
                         "p_two_range": (float(p_two.min()), float(p_two.max())),
                         "p_one_range": (float(p_one.min()), float(p_one.max()))})
    return rows


def claims(folders: dict[str, str | Path] | None = None) -> str:
    """Markdown: each comparison the paper reports a p-value for, its p as printed and as recomputed from its Table 1
    (:func:`paper_pvalues`), beside ours, paired by seed (:func:`compare`) in ``folders`` (data set -> folder of
    records; default: the 200-epoch MNIST protocol and the 100-epoch CIFAR-10 runs). Where DKM's form of soft k-means
    has records in the same folder (:data:`DKM_FORM`), OT against it follows OT against the soft-min form, with the
    paper's numbers of its soft k-means (DKM); without records, no row. A comparison without runs says so."""
    folders = folders or {"mnist": "results/protocol", "cifar10": "results/cifar10_long"}
    lines = [("The paper's Welch t-tests (50 runs a column) recomputed from its Table 1 with "
              "`scipy.stats.ttest_ind_from_stats(equal_var=False)`; in brackets, the least and largest p over every "
              "mean and std within 0.0005 of the printed value. Ours: paired by seed (`experiments.compare`)."), "",
             ("| data | a | b | paper: a - b | paper's p | t | p, two-sided [range] | p, one-sided a > b [range] | "
              "ours: folder | pairs | ours: a - b ± sd | paired p |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ours(folder: str | Path, a: str, b: str, dataset: str) -> str:
        try:
            c = compare(f"{folder}:{dataset}_{a}", f"{folder}:{dataset}_{b}", quiet=True)
        except ValueError:
            return f"`{folder}` | 0 | no runs | |"
        if c["n_paired"] < 2:  # one seed a side: a difference, no spread and no test
            return f"`{folder}` | {c['n_paired']} | {c['paired_diff']:+.3f} | — |"
        return f"`{folder}` | {c['n_paired']} | {c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | {c['paired_p']:.2g} |"

    for row in paper_pvalues():
        ds, a, b = row["dataset"], row["a"], row["b"]
        paper = (f"{row['diff']:+.3f} | {row['reported']} | {row['t']:.2f} | {row['p_two']:.2g} "
                 f"[{row['p_two_range'][0]:.2g}, {row['p_two_range'][1]:.2g}] | {row['p_one']:.2g} "
                 f"[{row['p_one_range'][0]:.2g}, {row['p_one_range'][1]:.2g}]")
        folder = folders.get(ds)
        lines.append(f"| {ds} | {a} | {b} | {paper} | " + (ours(folder, a, b, ds) if folder else "| | | |"))
        dkm = DKM_FORM.get(b)
        if folder and dkm and a.startswith("ot") and any(Path(folder).glob(f"{ds}_{dkm}__*.json")):
            lines.append(f"| {ds} | {a} | {dkm} (DKM's form) | {paper} | " + ours(folder, a, dkm, ds))
    return "\n".join(lines) + "\n"


def _save(fig, ax, path: Path) -> str:
    import matplotlib.pyplot as plt

    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def _grid_runs(records: list[dict], dataset: str, key: str, grid_key: str,
               grid_default: float | None) -> dict[str, dict[float, dict[int, float]]]:
    """Final ``key`` per method, value of ``grid_key`` and seed. Runs without that key in their grid count at
    ``grid_default`` (the config's own value, e.g. the protocol's epsilon), or not at all if it is None; and only
    for a method with runs on the grid, with the seeds those runs have, so every point of a curve averages the
    same seeds (a protocol folder holds more seeds at the config's own value than its sweep runs elsewhere)."""
    mine = [r for r in records if r["dataset"] == dataset and key in r["final"]]
    swept: dict[str, set[int]] = defaultdict(set)
    for r in mine:
        if grid_key in r["grid"]:
            swept[r["method"]].add(r["seed"])
    by: dict[str, dict[float, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in mine:
        if grid_key in r["grid"]:
            value = r["grid"][grid_key]
        elif grid_default is not None and r["seed"] in swept.get(r["method"], ()):
            value = grid_default
        else:
            continue
        by[r["method"]][float(value)][r["seed"]] = r["final"][key]
    return by


def _grid_points(records: list[dict], dataset: str, key: str, grid_key: str,
                 grid_default: float | None) -> dict[str, dict[float, list[float]]]:
    """:func:`_grid_runs` without the seeds: the final values of each point, in seed order."""
    return {method: {x: [v for _, v in sorted(runs.items())] for x, runs in points.items()}
            for method, points in _grid_runs(records, dataset, key, grid_key, grid_default).items()}


def _grid_markdown(by: dict[str, dict[float, dict[int, float]]], key: str, grid_key: str) -> str:
    """Figure 2 as tables: mean ± std (runs) per method and value, then every run by seed."""
    xs = sorted({x for points in by.values() for x in points})
    head = "| method | " + " | ".join(f"{x:g}" for x in xs) + " |\n|---|" + "---|" * len(xs)
    lines = [f"Final {key} by {grid_key}: mean ± std over seeds (runs).", "", head]
    for method, points in sorted(by.items()):
        cells = [f"{np.mean(list(points[x].values())):.3f} ± {np.std(list(points[x].values())):.3f} "
                 f"({len(points[x])})" if x in points else "" for x in xs]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "By seed:", "", head.replace("| method |", "| method | seed |").replace("|---|", "|---|---|", 1)]
    for method, points in sorted(by.items()):
        for seed in sorted({s for runs in points.values() for s in runs}):
            cells = [f"{points[x][seed]:.3f}" if seed in points.get(x, {}) else "" for x in xs]
            lines.append(f"| {method} | {seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def figures(out: str | Path, key: str = "val/acc", grid_key: str | None = None,
            grid_default: float | None = None) -> list[str]:
    """PNGs in ``out``: accuracy vs epoch per method (mean over seeds, band = ± std) of the runs without
    ``grid_key`` in their grid, and, if ``grid_key`` is given (e.g. ``model.epsilon``), final accuracy
    vs that setting per method (Figure 2 style, mean ± std over seeds), the other runs at ``grid_default`` if
    given (see :func:`_grid_runs`: the seeds of each point match). Returns the PNGs' paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = load(out)
    written = []
    for ds in sorted({r["dataset"] for r in records}):
        curves: dict[str, list[list[float]]] = defaultdict(list)
        for r in records:
            if r["dataset"] == ds and grid_key not in r["grid"]:
                ys = [c.get(key, np.nan) for _, c in sorted(r["curves"].items(), key=lambda kv: int(kv[0]))]
                label = " ".join([r["method"], *_tags(r["grid"])])
                curves[label].append(ys)
        if curves:
            fig, ax = plt.subplots(figsize=(6, 4))
            for i, (method, runs) in enumerate(sorted(curves.items())):
                n = min(len(y) for y in runs)
                y = np.array([r[:n] for r in runs])
                mean, std = np.nanmean(y, 0), np.nanstd(y, 0)
                # matplotlib cycles 10 colours: past them, a new line style keeps every curve its own.
                ax.plot(range(n), mean, label=f"{method} ({len(runs)} runs)", linestyle=("-", "--", ":")[i // 10 % 3])
                ax.fill_between(range(n), mean - std, mean + std, alpha=0.2)
            ax.set(xlabel="epoch", ylabel=key, title=f"{ds}: {key} per epoch (mean ± std over seeds)")
            written.append(_save(fig, ax, Path(out) / f"figure1_{ds}.png"))
        if grid_key:
            by = _grid_points(records, ds, key, grid_key, grid_default)
            fig, ax = plt.subplots(figsize=(6, 4))
            for method, points in sorted(by.items()):
                xs = sorted(points)
                runs = sorted({len(points[x]) for x in xs})  # while a sweep lands, points can differ
                count = f"{runs[0]}" if len(runs) == 1 else f"{runs[0]}-{runs[-1]}"
                ax.errorbar(xs, [np.mean(points[x]) for x in xs], yerr=[np.std(points[x]) for x in xs],
                            marker="o", capsize=3, label=f"{method} ({count} run{'s' if count != '1' else ''} a point)")
            ax.set(xscale="log", xlabel=grid_key, ylabel=f"final {key}", title=f"{ds}: final {key} vs {grid_key}")
            written.append(_save(fig, ax, Path(out) / f"figure2_{ds}.png"))
    return written


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


def confusion_report(records: list[dict], methods: list[str], epochs: list[int], share: float = 0.15,
                     source: str = "") -> str:
    """Which classes merge or split over training: per seed, method and epoch of the confusion counts the records
    keep (``record["confusion"]``), the accuracy and every class b of which at least ``share`` of the images sit in
    the cluster matched to another class a, as ``b>a 45%``. Runs with grid settings are left out."""
    runs: dict[int, dict[str, dict]] = defaultdict(dict)  # seed -> method -> record
    for record in records:
        if record.get("confusion") and not record["grid"] and record["method"] in methods:
            runs[record["seed"]][record["method"]] = record
    lines = [f"Output of `{source}`: for each class b with at least {share:.0%} of its images in the cluster matched "
             "to another class a, `b>a share` (`-`: a cluster matched to no class). Accuracy is the Hungarian "
             "accuracy of the same counts.", "",
             "| seed | method | " + " | ".join(f"epoch {e}" for e in epochs) + " |", "|---|---|" + "---|" * len(epochs)]
    for seed in sorted(runs):
        for method in methods:
            if method not in runs[seed]:
                continue
            cells = []
            for epoch in epochs:
                counts = runs[seed][method]["confusion"].get(str(epoch))
                if counts is None:
                    cells.append("—")
                    continue
                acc, pairs = confused(counts, share)
                cells.append(f"{acc:.3f}: " + (", ".join(pairs) or "clean"))
            lines.append(f"| {seed} | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def proxy_check(records: str, at: int = 39, proxy: str | None = None) -> str:
    """Is a short run predictive? val/acc after epoch ``at`` (0-based) against the last epoch of the from-scratch runs
    in ``records`` with their config's own settings (no (p) runs, whose early epochs are pre-training, and no grid
    runs): the Spearman rank correlation over runs, the means per config and, by seed, OT minus soft k-means at
    both. With ``proxy``, the same config and seed run for ``at + 1`` epochs in that folder against epoch ``at`` of
    the longer run: a difference is the runs' non-determinism or a change of the code (each record's ``commit``)."""
    runs = [r for r in load(records)
            if not r["config"].endswith("_p") and not r.get("grid") and str(at) in r["curves"]]
    rows = []
    for r in runs:
        last = max(r["curves"], key=int)
        rows.append((r["config"], r["seed"], r["curves"][str(at)]["val/acc"], r["curves"][last]["val/acc"], int(last)))
    lines = [f"{records}: val/acc after epoch {at} (0-based) and at the run's last epoch", "",
             f"| config | seed | proxy (epoch {at}) | last epoch | last |", "|---|---|---|---|---|"]
    lines += [f"| {config} | {seed} | {short:.3f} | {last} | {final:.3f} |"
              for config, seed, short, final, last in rows]
    rho, p = stats.spearmanr([r[2] for r in rows], [r[3] for r in rows])
    lines += ["", f"Spearman rank correlation over the {len(rows)} runs: {rho:.2f} (p = {p:.2g})", "",
              "| config | runs | mean at the proxy | mean at the last epoch |", "|---|---|---|---|"]
    for config in sorted({r[0] for r in rows}):
        sel = [r for r in rows if r[0] == config]
        short, final = np.mean([r[2] for r in sel]), np.mean([r[3] for r in sel])
        lines.append(f"| {config} | {len(sel)} | {short:.3f} | {final:.3f} |")
    by = {(r[0], r[1]): r for r in rows}
    seeds = sorted({s for c, s in by if c == "mnist_ot" and ("mnist_soft_kmeans", s) in by})
    if seeds:
        lines += ["", "OT minus soft k-means, by seed (the recipe study's comparison):", "",
                  "| seed | at the proxy | at the last epoch |", "|---|---|---|"]
        for s in seeds:
            ot, skm = by[("mnist_ot", s)], by[("mnist_soft_kmeans", s)]
            lines.append(f"| {s} | {ot[2] - skm[2]:+.3f} | {ot[3] - skm[3]:+.3f} |")
    if proxy:
        lines += ["", f"The same config and seed in {proxy} (its last epoch) against epoch {at} above:", "",
                  "| config | seed | short run | long run at the same epoch | difference |", "|---|---|---|---|---|"]
        for config, seed, long_at, _, _ in rows:
            path = Path(proxy) / f"{config}__seed={seed}.json"
            if path.exists():
                short = json.loads(path.read_text())
                if max(map(int, short["curves"])) == at:
                    acc = short["final"]["val/acc"]
                    lines.append(f"| {config} | {seed} | {acc:.4f} | {long_at:.4f} | {acc - long_at:+.4f} |")
    return "\n".join(lines) + "\n"


_REPORT_KEYS = {"key", "baselines", "grid_key", "grid_default", "confusion", "proxy_check", "compare", "imbalanced"}


def report_folder(out: str | Path, key: str = "val/acc", baselines: str | None = BASELINES,
                  grid_key: str | None = None, grid_default: float | None = None) -> list[Path]:
    """``table.md`` and the figures (:func:`figures`) of the records in folder ``out``, Figure 2's numbers in
    ``figure2_<data>.md`` if ``grid_key`` is given. Returns the files written."""
    out = Path(out)
    (out / "table.md").write_text(table(out, key, baselines))
    written = [out / "table.md", *map(Path, figures(out, key, grid_key, grid_default))]
    if grid_key:
        records = load(out)
        for ds in sorted({r["dataset"] for r in records}):
            path = out / f"figure2_{ds}.md"
            path.write_text(_grid_markdown(_grid_runs(records, ds, key, grid_key, grid_default), key, grid_key))
            written.append(path)
    return written


def report(study: Study) -> list[Path]:
    """Write a study's report into its folders; returns the files written. Every folder of records gets
    :func:`report_folder`; the study file's ``report:`` mapping adds, in ``out``:

    - ``key`` (``val/acc``), ``baselines`` (:data:`BASELINES`; null: none), ``grid_key``, ``grid_default``: for
      :func:`report_folder`;
    - ``confusion``: a list of ``{file, methods, epochs[, share]}``, each a :func:`confusion_report`;
    - ``proxy_check``: ``{file[, at, proxy]}``, a :func:`proxy_check` of ``out``;
    - ``compare``: a list of ``{a, b[, key, epoch, key_b, against]}``, paired tests (:func:`compare`) in ``compare.md``;
    - ``imbalanced``: ``{balanced: FOLDER}``, issue #12's ``report.md`` and figure (:func:`imbalanced_report`).
    """
    options = study.report
    if set(options) - _REPORT_KEYS:
        raise ValueError(f"{study.path}: report keys {sorted(set(options) - _REPORT_KEYS)} unknown "
                         f"(keys: {sorted(_REPORT_KEYS)})")
    key = options.get("key", "val/acc")
    source = f"python -m lit_otclust.experiments report {study.path}"
    written = []
    for folder in study.folders:
        if any(folder.glob("*.json")):
            written += report_folder(folder, key, options.get("baselines", BASELINES), options.get("grid_key"),
                                     options.get("grid_default"))
    for spec in options.get("confusion", []):
        path = study.out / spec["file"]
        path.write_text(confusion_report(load(study.out), spec["methods"], spec["epochs"], spec.get("share", 0.15),
                                         source))
        written.append(path)
    if "proxy_check" in options:
        spec = options["proxy_check"]
        path = study.out / spec["file"]
        path.write_text(proxy_check(str(study.out), spec.get("at", 39), spec.get("proxy")))
        written.append(path)
    if options.get("compare"):
        path = study.out / "compare.md"
        path.write_text(compare_table(options["compare"]))
        written.append(path)
    if "imbalanced" in options:
        written += imbalanced_report(study.out, options["imbalanced"]["balanced"], source)
    return written

# Issue #12's report. Method label -> (folder under the data set's, config, grid tags).
IMBALANCED_METHODS = {
    "soft k-means": ("uniform_w", "mnist_soft_kmeans", ""),
    "OT, uniform w": ("uniform_w", "mnist_ot", ""),
    "unbalanced OT (reg_m 0.2), uniform w": ("uniform_w", "mnist_ot", "reg_m=0.2"),
    "OT, true w, matched by size": ("true_w", "mnist_ot", "match_proportions=sizes"),
    "OT, true w, k-means order": ("true_w", "mnist_ot", "match_proportions=none"),
    "OT, misspecified w (+-30%), matched": ("misspecified_w", "mnist_ot", ""),
}
# data set folder -> (label, largest/smallest class, the true proportions' smallest and largest entries)
IMBALANCED_SETS = {
    "balanced": ("10 digits, balanced", 1.0, (0.1, 0.1)),
    "geometric3": ("10 digits, geometric", 3.0, (0.0543, 0.163)),
    "geometric10": ("10 digits, geometric", 10.0, (0.0245, 0.2447)),
    "two_digits": ("digits 1 and 2, 20% / 80%", 4.0, (0.2, 0.8)),
}
IMBALANCED_PAIRS = [  # (a, b): the effect of a over b, paired by seed
    ("OT, true w, matched by size", "OT, uniform w"),
    ("OT, true w, matched by size", "soft k-means"),
    ("OT, true w, matched by size", "OT, true w, k-means order"),
    ("OT, misspecified w (+-30%), matched", "OT, true w, matched by size"),
    ("unbalanced OT (reg_m 0.2), uniform w", "OT, uniform w"),
    ("unbalanced OT (reg_m 0.2), uniform w", "soft k-means"),
]


def _imbalanced_spec(out: Path, balanced: str, name: str, method: str) -> str:
    """The ``DIR:CONFIG[:tags]`` of a method's runs on data set ``name``. On balanced MNIST the uniform w is the
    true w and every size order matches it, so the true-w runs are the uniform-w runs; those, soft k-means and
    unbalanced OT are the ``balanced`` folder's (the recipe study's, the same commands)."""
    folder, config, tags = IMBALANCED_METHODS[method]
    if name == "balanced" and folder != "misspecified_w":
        return f"{balanced}:{config}" + (f":{tags}" if tags and folder != "true_w" else "")
    return f"{out / name / folder}:{config}" + (f":{tags}" if tags else "")


def imbalanced_report(out: Path, balanced: str, source: str) -> list[Path]:
    """Issue #12's ``report.md`` (accuracy and sizes per data set and method, paired tests) and
    ``accuracy_vs_imbalance.png`` in ``out``, from the records under ``out/<data set>/<w>/`` and, for balanced
    MNIST, ``balanced``. Sets or methods without runs are left out and named."""
    lines = ["# Known non-uniform cluster sizes (issue #12)", "",
             "40-epoch proxy, no pre-training, seeds 0-4; val/* on the clustered images, each assigned to its "
             "nearest center (the paper's rule; cluster sizes are of that assignment). Written by "
             f"`{source}` from the run records.", "",
             "| data | largest/smallest | method | runs | acc mean ± sd | acc, potential rule | NMI | ARI | smallest cluster (true) | largest cluster (true) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    missing, acc = [], {}
    for name, (label, ratio, (w_min, w_max)) in IMBALANCED_SETS.items():
        for method, (folder, config, _) in IMBALANCED_METHODS.items():
            try:
                rs = _select(_imbalanced_spec(out, balanced, name, method))
            except ValueError:
                missing.append(f"{label} ({ratio:g}): {method}")
                continue
            f = {k: np.array([r["final"][k] for r in rs]) for k in ("val/acc", "val/nmi", "val/ari", "val/size_min", "val/size_max")}
            # argmin_k ||z - mu_k||^2 - g_k, g the running mean of the Sinkhorn cluster potentials: the rule that
            # keeps OT's sizes (soft k-means has g = 0, so it equals acc there and is not repeated).
            potential = f"{np.mean([r['final']['val/acc_potential'] for r in rs]):.3f}" if config == "mnist_ot" else "—"
            acc[name, method] = f["val/acc"]
            sd = f" ± {f['val/acc'].std(ddof=1):.3f}" if len(rs) > 1 else ""
            same = " (the uniform-w runs)" if name == "balanced" and folder == "true_w" else ""
            lines.append(f"| {label} | {ratio:g} | {method}{same} | {len(rs)} | {f['val/acc'].mean():.3f}{sd} | "
                         f"{potential} | {f['val/nmi'].mean():.3f} | {f['val/ari'].mean():.3f} | "
                         f"{f['val/size_min'].mean():.3f} ({w_min:g}) | {f['val/size_max'].mean():.3f} ({w_max:g}) |")
    lines += ["", "Paired by seed (`lit_otclust.experiments.compare`: paired t-test over the seeds both have):", "",
              "| data | largest/smallest | a | b | mean a - b ± sd | paired p |", "|---|---|---|---|---|---|"]
    for name, (label, ratio, _) in IMBALANCED_SETS.items():
        spec = {m: _imbalanced_spec(out, balanced, name, m) for m in IMBALANCED_METHODS}
        for a, b in IMBALANCED_PAIRS:
            if (name, a) in acc and (name, b) in acc and spec[a] != spec[b]:
                c = compare(spec[a], spec[b], quiet=True)
                lines.append(f"| {label} | {ratio:g} | {a} | {b} | {c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | {c['paired_p']:.3g} |")
        method = "OT, true w, matched by size"  # the same runs under the two assignment rules
        if (name, method) in acc and name != "balanced":
            c = compare(spec[method], spec[method], key="val/acc_potential", key_b="val/acc", quiet=True)
            lines.append(f"| {label} | {ratio:g} | {method}, potential rule | the same runs, nearest center | "
                         f"{c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | {c['paired_p']:.3g} |")
    if missing:
        lines += ["", "Not run yet: " + "; ".join(missing) + "."]
    lines += ["", "![accuracy against imbalance](accuracy_vs_imbalance.png)"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _imbalanced_figure(acc, out / "accuracy_vs_imbalance.png")
    return [out / "report.md", out / "accuracy_vs_imbalance.png"]


def _imbalanced_figure(acc: dict[tuple[str, str], np.ndarray], path: Path) -> None:
    """(a) 10 digits: accuracy against largest/smallest, a line per method; (b) the two-digit set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.6, 1]})
    ten = [n for n in IMBALANCED_SETS if n != "two_digits"]
    for i, method in enumerate(IMBALANCED_METHODS):
        pts = [(IMBALANCED_SETS[n][1], acc[n, method]) for n in ten if (n, method) in acc]
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
    right.set_xticks(range(len(IMBALANCED_METHODS)), [m.replace(", ", ",\n", 1) for m in IMBALANCED_METHODS],
                     fontsize=6, rotation=30, ha="right")
    right.set(title="(b) digits 1 and 2, 20% / 80%", ylabel="accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lit_otclust.experiments", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="fit a study's runs that have no record yet")
    p.add_argument("study", help="a study file, e.g. configs/studies/protocol.yaml")
    p.add_argument("--jobs", type=int, default=None, help="runs at a time (a GPU each where several; SLURM: no limit)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads a run (OMP_NUM_THREADS)")
    p.add_argument("--launcher", choices=["local", "slurm"], default="local")
    p.add_argument("--dry-run", action="store_true", help="print each run's command; start nothing")
    p.add_argument("--run", default=None, metavar="NAME", help="only this run (a SLURM array task's)")
    p.add_argument("--wandb", action="store_true", help="also log each run to W&B (offline without credentials)")
    p.add_argument("--slurm-option", action="append", default=[], metavar="OPTION",
                   help="an #SBATCH option of the array, e.g. --slurm-option=--gpus-per-task=1 (repeatable)")
    p.add_argument("--sbatch", default="sbatch", help="the submit command")
    p = sub.add_parser("report", help="write a study's tables, figures and paired tests into its folder")
    p.add_argument("study", nargs="?", default=None, help="a study file")
    p.add_argument("--out", default=None, help="instead of a study: a folder of records")
    p.add_argument("--key", default="val/acc")
    p.add_argument("--baselines", default=BASELINES)
    p.add_argument("--grid_key", default=None)
    p.add_argument("--grid_default", type=float, default=None)
    p = sub.add_parser("compare", help=compare.__doc__.splitlines()[0])
    p.add_argument("--a", required=True, metavar="DIR:CONFIG[:key=value,...]")
    p.add_argument("--b", required=True, metavar="DIR:CONFIG[:key=value,...]")
    p.add_argument("--key", default="val/acc")
    p.add_argument("--epoch", type=int, default=None)
    p.add_argument("--key_b", default=None)
    p.add_argument("--against", type=float, default=None, help="a claimed difference to test (e.g. the paper's)")
    p = sub.add_parser("claims", help="the paper's p-values recomputed from its Table 1, beside ours paired by seed")
    p.add_argument("--mnist", default="results/protocol", help="MNIST's folder of records")
    p.add_argument("--cifar10", default="results/cifar10_long", help="CIFAR-10's folder of records")
    args = parser.parse_args(argv)
    if args.command == "compare":
        compare(args.a, args.b, args.key, args.epoch, args.key_b, args.against)
        return 0
    if args.command == "claims":
        print(claims({"mnist": args.mnist, "cifar10": args.cifar10}), end="")
        return 0
    if args.command == "report":
        if (args.study is None) == (args.out is None):
            parser.error("report takes a study file or --out FOLDER")
        written = (report(load_study(args.study)) if args.study else
                   report_folder(args.out, args.key, args.baselines or None, args.grid_key, args.grid_default))
        print("\n".join(map(str, written)))
        return 0
    study = load_study(args.study)
    if args.run is not None:
        return run_named(study, args.run, args.threads, args.wandb)
    if args.dry_run:
        dry_run(study)
    if args.launcher == "slurm":
        submit_slurm(study, args.threads, args.jobs, args.slurm_option, args.sbatch, args.dry_run)
        return 0
    return 0 if args.dry_run else run_local(study, args.jobs or 1, args.threads, args.wandb)


if __name__ == "__main__":
    sys.exit(main())
