"""The statistics of the studies: Table 1 beside the paper's numbers with Welch t-tests (:func:`table`), paired
tests by seed between two sets of runs (:func:`compare`, :func:`compare_table`, :func:`paired_power`), and the
paper's own p-values recomputed from its Table 1 beside ours (:func:`paper_pvalues`, :func:`claims`). Everything
here reads run records (one JSON file a run, :func:`load`) and returns numbers or Markdown; it writes no file.
``python -m lit_otclust.experiments`` (``compare``, ``claims``) is its command line, and re-exports every name.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from lit_otclust.lab.paper import PAPER, PAPER_P, PAPER_RUNS  # noqa: F401 (re-exported)
from lit_otclust.lab.studies import parse_seeds

# Table 1's rows in order; soft k-means in DKM's form (the paper's soft k-means, DKM_FORM) beside the soft-min form.
METHODS = ["kmeans", "ae_kmeans", "soft_kmeans", "soft_kmeans_dkm", "soft_kmeans_p", "soft_kmeans_dkm_p", "ot", "ot_p"]
# The paper's Welch t-tests: (a, b) pairs it reports p-values for; then OT against DKM's form of soft k-means.
COMPARISONS = [("ot", "soft_kmeans"), ("ot_p", "soft_kmeans_p"), ("ot_p", "ot"), ("soft_kmeans_p", "soft_kmeans"),
               ("ot", "soft_kmeans_dkm"), ("ot_p", "soft_kmeans_dkm_p")]
BASELINES = "results/kmeans_raw"  # `python -m lit_otclust.lab.baselines` records: k-means on raw pixels
# Table 1's row groups: per data set, a label -> each column's grid tags as its records' names carry them (a column
# not named: its runs without tags). The first group is what the shipped configs run (configs/<data>_<column>.yaml;
# tests/test_experiments.py checks the two agree); MNIST's second, the configs before they shipped lambda = 0.1.
_MNIST_SHIPPED = {"ot": "clustering_weight=0.1,sinkhorn_iters=10,sinkhorn_solver=fixed",
                  "ot_p": "clustering_weight=0.1,sinkhorn_iters=10,sinkhorn_solver=fixed",
                  **{m: "clustering_weight=0.1" for m in ("soft_kmeans", "soft_kmeans_p", "soft_kmeans_dkm",
                                                          "soft_kmeans_dkm_p")}}
SETTINGS = {"mnist": {"the shipped configs: lambda = 0.1, OT's fixed solve": _MNIST_SHIPPED,
                      "the configs before: lambda = 1/300, OT solved to tolerance": {}},
            "cifar10": {"the shipped configs: lambda = 1, OT solved to tolerance": {}}}
NAMES = {"kmeans": "k-means on pixels", "ae_kmeans": "AE + k-means", "soft_kmeans": "soft k-means",
         "soft_kmeans_dkm": "soft k-means, DKM's loss", "soft_kmeans_p": "soft k-means (p)",
         "soft_kmeans_dkm_p": "soft k-means (p), DKM's loss", "ot": "OT", "ot_p": "OT (p)"}


def _tags(grid: dict[str, str]) -> list[str]:
    """``key=value`` per grid setting, by the key's last component: ``model.epsilon`` -> ``epsilon=0.1``."""
    return [f"{k.split('.')[-1]}={v}" for k, v in sorted(grid.items())]


def _tag_list(tags: str) -> list[str]:
    """``key=value,...`` as in run names, as a sorted list ("": none); a comma inside a list value
    (``hidden_dims=[500,250]``) is the value's."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(tags + ","):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(tags[start:i])
            start = i + 1
    return sorted(t for t in parts if t)


def _has_tags(record: dict, tags: str) -> bool:
    """Whether a record's grid settings are exactly ``tags`` (``key=value,...`` as in run names; "": no grid): as
    they took effect (its ``grid``) or as its study wrote them (its name), which differ where a committed study's old
    flag was translated (``model.lr`` ran as ``model.optimizer.init_args.lr`` with the optimiser's class)."""
    want = _tag_list(tags)
    if sorted(_tags(record["grid"])) == want:
        return True
    if "name" not in record:  # a record written by hand (the tests'): its grid alone
        return False
    name = record["name"].removeprefix(record.get("config", "")).rsplit("__seed=", 1)[0]
    return sorted(t for t in name.split("__") if t) == want


def _paper(dataset: str, method: str) -> tuple:
    """The paper's (mean, std, min, max) of a Table 1 column (None each where it has none); DKM's form of soft
    k-means is the paper's soft k-means."""
    return PAPER.get(dataset, {}).get({d: s for s, d in DKM_FORM.items()}.get(method, method), (None,) * 4)


def _pixel_kmeans(baselines: str | None) -> list[dict]:
    """The ``python -m lit_otclust.lab.baselines`` outputs in folder ``baselines`` (k-means on pixels), if any."""
    if not baselines or not Path(baselines).is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(Path(baselines).glob("*.json"))]


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
        baselines: a folder of ``python -m lit_otclust.lab.baselines`` JSON outputs (k-means on pixels), or None.
    """
    records = load(out)
    groups = _group(records, key)
    # The overrides every run of a column shares: a record's settings less its grid point, which names the column. A
    # per-seed value (a study's ``{seed}``, e.g. each seed's pre-trained weights) is written back as that template, so
    # ten seeds' checkpoints read as one override and not ten.
    overrides = [{f"{k}={_seed_template(str(v), r['seed'])}" for k, v in r["settings"].items() if k not in r["grid"]}
                 for r in records]
    every_run = set.intersection(*overrides) if overrides else set()
    fixed = sorted(every_run) + [f"{o} (some runs)" for o in sorted(set().union(*overrides) - every_run)]
    datasets = {r["dataset"] for r in records}
    for b in _pixel_kmeans(baselines):
        if b["dataset"] in datasets or not records:
            groups[(b["dataset"], "kmeans", "{}")].append(b["acc"])
    lines = ["| data | method | settings | runs | ours: mean (± std) | ours: [min, max] | paper: mean (± std) | paper: [min, max] |",
             "|---|---|---|---|---|---|---|---|"]
    for (ds, method, grid), accs in sorted(groups.items(), key=lambda kv: (kv[0][0], METHODS.index(kv[0][1]) if kv[0][1] in METHODS else 99, kv[0][2])):
        a = np.array(accs)
        pm, ps, pmin, pmax = _paper(ds, method)
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


def _seed_template(value: str, seed: int) -> str:
    """``value`` with its run's ``seed=<seed>`` written as the study file's ``seed={seed}``."""
    return re.sub(rf"seed={seed}(?!\d)", "seed={seed}", value)


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


def _seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    spans: list[list[int]] = []
    for s in sorted(seeds):
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def table1(out: str | Path, dataset: str, groups: dict[str, dict[str, str]] | None = None,
           baselines: str | None = BASELINES) -> str:
    """Markdown: Table 1 of one data set by row group (default :data:`SETTINGS`), each column of a group its runs'
    seeds, mean (± std) and [min, max] of the final ``val/acc``, NMI, the smallest and largest cluster (fractions of
    the images, means over seeds), beside the paper's mean (± std) [min, max] (:data:`PAPER`; the paper's soft
    k-means is DKM's). A column without runs in ``out`` is left out; k-means on pixels comes from ``baselines``."""
    groups = SETTINGS.get(dataset, {"": {}}) if groups is None else groups
    records = [r for r in load(out) if r["dataset"] == dataset]

    def paper(method: str) -> str:
        pm, ps, pmin, pmax = _paper(dataset, method)
        return "" if pm is None else f"{pm:.3f}" + (f" (± {ps:.3f}) [{pmin:.3f}, {pmax:.3f}]" if ps else "")

    lines = [f"{dataset}: final `val/acc` over all the clustered images; NMI, smallest and largest cluster: means over "
             "seeds. The paper: 50 runs of 200 epochs.", "",
             "| column | settings | seeds | ours: mean (± std) | [min, max] | NMI | smallest / largest cluster | "
             "paper: mean (± std) [min, max] |", "|---|---|---|---|---|---|---|---|"]
    pixels = [b["acc"] for b in _pixel_kmeans(baselines) if b["dataset"] == dataset]
    if pixels:
        lines.append(f"| {NAMES['kmeans']} | | | {np.mean(pixels):.3f} | | | | {paper('kmeans')} |")
    shown: set[tuple] = set()
    for label, tags in groups.items():
        if label:
            lines.append(f"| **{label}** | | | | | | | |")
        for method in METHODS[1:]:
            want = tags.get(method, "")
            runs = [r for r in records if r["method"] == method and _has_tags(r, want)]
            if not runs or (method, want) in shown:  # AE + k-means: one row, whatever lambda the others
                continue
            shown.add((method, want))
            acc = np.array([r["final"]["val/acc"] for r in runs])
            std = f" (± {acc.std(ddof=1):.3f})" if len(acc) > 1 else ""
            mean = {k: np.mean([r["final"].get(k, np.nan) for r in runs])
                    for k in ("val/nmi", "val/size_min", "val/size_max")}
            lines.append(f"| {NAMES[method]} | {', '.join(_tags(runs[0]['grid']))} | {_seed_ranges([r['seed'] for r in runs])} | "
                         f"{acc.mean():.3f}{std} | [{acc.min():.3f}, {acc.max():.3f}] | {mean['val/nmi']:.3f} | "
                         f"{mean['val/size_min']:.3f} / {mean['val/size_max']:.3f} | {paper(method)} |")
    return "\n".join(lines) + "\n"


def select(spec: str) -> list[dict]:
    """Runs named by ``DIR:CONFIG[:key=value,...]`` (grid tags as in run names; none: the runs without a grid)."""
    folder, _, rest = spec.partition(":")
    config, _, tags = rest.partition(":")
    if not config:
        raise ValueError(f"{spec!r} must look like DIR:CONFIG[:key=value,...], e.g. results/study_recipe:mnist_ot")
    runs = [r for r in load(folder) if r["config"] == config and _has_tags(r, tags)]
    if not runs:
        raise ValueError(f"no runs of {config} with settings {_tag_list(tags) or 'none'} in {folder}")
    return runs


def _value(record: dict, key: str, epoch: int | str | None) -> float:
    """``key`` at the end of the run, at ``epoch`` of its curves (a shorter proxy of a longer run), or at its lowest
    epoch (``"lowest"``: the worst the run passed through, e.g. whether a phase ever fell below its start)."""
    if epoch is None:
        return record["final"][key]
    curves = record["curves"]
    if epoch == "lowest":
        values = [row[key] for row in curves.values() if key in row]
        if not values:
            raise ValueError(f"{record['name']} logged no {key} in its curves")
        return min(values)
    if str(epoch) not in curves:
        raise ValueError(f"{record['name']} has no epoch {epoch} (it has {len(curves)} epochs)")
    if key not in curves[str(epoch)]:
        raise ValueError(f"{record['name']} logged no {key} at epoch {epoch} (there: {sorted(curves[str(epoch)])})")
    return curves[str(epoch)][key]


def paired_power(delta: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level ``alpha`` to detect a mean difference ``delta`` with ``n``
    pairs whose differences have standard deviation ``sd``: P(|T| > t_{1 - alpha/2, n - 1}) for T noncentral t
    with n - 1 degrees of freedom and noncentrality delta sqrt(n) / sd."""
    df, nc = n - 1, delta * np.sqrt(n) / sd
    crit = stats.t.ppf(1 - alpha / 2, df)
    # The lower tail as the upper tail of -T: scipy's nct.cdf far below a large noncentrality returns nan.
    return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc))


def compare(a: str, b: str, key: str = "val/acc", epoch: int | str | None = None, key_b: str | None = None,
            against: float | None = None, quiet: bool = False, seeds: Any = None,
            epoch_b: int | str | None = None) -> dict[str, float]:
    """Effect of a over b, paired by seed: mean difference ± its std, its 95% confidence interval (t), the
    paired t-test and Welch p-values.

    Args:
        a, b: ``DIR:CONFIG[:key=value,...]``, e.g. ``results/study_recipe:mnist_ot:reg_m_start=0.01``.
        key: the metric. epoch: compare at this epoch of the curves instead of the last one; ``"lowest"``: at each
            run's lowest epoch.
        key_b: b's metric, if not ``key`` (e.g. two assignment rules of the same runs).
        epoch_b: b's epoch, if not ``epoch`` (e.g. AE + k-means at the end of two pre-trainings of different
            lengths, each the last epoch before its switch).
        against: a difference claimed elsewhere (e.g. the paper's +0.041): also the paired t-test of
            "the mean difference is ``against``" (``against_p``), and the power these pairs had to detect a
            difference that large at the 5% level, given their spread (``against_power``, :func:`paired_power`).
        quiet: return the numbers without printing the sentence that states them.
        seeds: only these seeds, both sides (a list, one seed, or a range "5-9", as a study file takes them): a
            test on seeds that played no part in choosing what is compared.
    """
    keep = None if seeds is None else set(parse_seeds(seeds))
    runs_a = {r["seed"]: _value(r, key, epoch) for r in select(a) if keep is None or r["seed"] in keep}
    epoch_b = epoch if epoch_b is None else epoch_b
    runs_b = {r["seed"]: _value(r, key_b or key, epoch_b) for r in select(b) if keep is None or r["seed"] in keep}
    if not runs_a or not runs_b:
        raise ValueError(f"no runs of {a if not runs_a else b} on seeds {seeds}")
    seeds = sorted(set(runs_a) & set(runs_b))
    if not seeds:  # nothing to pair: say which seeds each side has rather than print nan
        raise ValueError(f"{a} (seeds {_seed_ranges(sorted(runs_a))}) and {b} (seeds {_seed_ranges(sorted(runs_b))}) "
                         "share no seed")
    diff = np.array([runs_a[s] - runs_b[s] for s in seeds])
    paired = stats.ttest_rel([runs_a[s] for s in seeds], [runs_b[s] for s in seeds]) if len(seeds) > 1 else None
    ci = paired.confidence_interval(0.95) if paired is not None else (np.nan, np.nan)
    out = {"n_paired": len(seeds), "seeds": seeds, "n_a": len(runs_a), "n_b": len(runs_b),
           "mean_a": float(np.mean(list(runs_a.values()))), "mean_b": float(np.mean(list(runs_b.values()))),
           "paired_diff": float(diff.mean()) if len(diff) else np.nan,
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
        print(f"{key}{'' if key_b in (None, key) else ' vs ' + key_b} at {_at(epoch, epoch_b)}: a {out['mean_a']:.3f} ({len(runs_a)} runs), b {out['mean_b']:.3f} ({len(runs_b)} runs); "
              f"paired over seeds {seeds}: {out['paired_diff']:+.3f} ± {out['paired_sd']:.3f} (95% CI "
              f"[{out['paired_ci_low']:+.3f}, {out['paired_ci_high']:+.3f}]), p = {out['paired_p']:.3g}; "
              f"Welch p = {out['welch_p']:.3g}")
        if "against" in out:
            print(f"against a difference of {against:+.3f}: paired p = {out['against_p']:.3g}; these {len(diff)} pairs had "
                  f"power {out['against_power']:.2f} to detect it at the 5% level")
    return out


def _at(epoch: int | str | None, epoch_b: int | str | None) -> str:
    """Where a comparison reads its runs: "final", "epoch 49", "epoch lowest", or "epoch 299 vs 49" when b's epoch
    differs."""
    at = "final" if epoch is None else f"epoch {epoch}"
    return at if epoch_b in (None, epoch) else f"{at} vs {epoch_b}"


def compare_table(pairs: list[dict[str, Any]]) -> str:
    """Markdown of :func:`compare` for each ``{a, b[, key, epoch, key_b, epoch_b, against]}`` of ``pairs``, paired by
    seed."""
    lines = ["Paired by seed (`experiments.compare`): mean difference a - b ± its sd over the seeds both have (pairs), "
             "its 95% CI (t) and the paired t-test; mean a and mean b are over all runs of each (their count in "
             "brackets), as Welch's test takes them.", "",
             "| a | b | metric | at | pairs | mean a (runs) | mean b (runs) | a - b ± sd | 95% CI | paired p | Welch p |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    claims = []  # the tests of a difference claimed elsewhere
    for pair in pairs:
        key = pair.get("key", "val/acc") + (f" vs {pair['key_b']}" if pair.get("key_b") else "")
        at = _at(pair.get("epoch"), pair.get("epoch_b"))
        if pair.get("seeds") is not None:
            at += f", seeds {pair['seeds']}"
        try:
            c = compare(**pair, quiet=True)
        except ValueError as missing:  # a study's report is written while its runs land
            lines.append(f"| `{pair['a']}` | `{pair['b']}` | {key} | {at} | 0 | {missing} | | | | | |")
            continue
        lines.append(f"| `{pair['a']}` | `{pair['b']}` | {key} | {at} | {c['n_paired']} | "
                     f"{c['mean_a']:.3f} ({c['n_a']}) | {c['mean_b']:.3f} ({c['n_b']}) | {c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | "
                     f"[{c['paired_ci_low']:+.3f}, {c['paired_ci_high']:+.3f}] | {c['paired_p']:.3g} | "
                     f"{c['welch_p']:.3g} |")
        if "against" in c:
            claims.append(f"- `{pair['a']}` - `{pair['b']}` against a difference of {c['against']:+.3f}: paired p = "
                          f"{c['against_p']:.3g}; these {c['n_paired']} pairs had power {c['against_power']:.2f} to "
                          "detect it at the 5% level.")
    return "\n".join(lines + ([""] + claims if claims else [])) + "\n"


# ---- the paper's own statistics ----------------------------------------------------------------------------------

# The paper's soft k-means is DKM (Fard et al.), whose loss is the expected distance under the soft assignment;
# configs/mnist_soft_kmeans_dkm*.yaml train that form (SoftKMeans(form="expected")), ours the soft-min.
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


def claims(folders: dict[str, str | Path] | None = None,
           settings: dict[str, dict[str, dict[str, str]]] | None = None) -> str:
    """Markdown: each comparison the paper reports a p-value for, its p as printed and as recomputed from its Table 1
    (:func:`paper_pvalues`), beside ours, paired by seed (:func:`compare`) in ``folders`` (data set -> folder of
    records; default: the 200-epoch MNIST protocol and the 100-epoch CIFAR-10 runs), one row per row group of
    ``settings`` (default :data:`SETTINGS`: the shipped configs first). Where DKM's form of soft k-means has records
    (:data:`DKM_FORM`), OT against it follows OT against the soft-min form, with the paper's numbers of its soft
    k-means (DKM); without records, no row. A comparison without runs says so."""
    folders = folders or {"mnist": "results/protocol", "cifar10": "results/cifar10_long"}
    settings = SETTINGS if settings is None else settings
    lines = [("The paper's Welch t-tests (50 runs a column) recomputed from its Table 1 with "
              "`scipy.stats.ttest_ind_from_stats(equal_var=False)`; in brackets, the least and largest p over every "
              "mean and std within 0.0005 of the printed value. Ours: paired by seed (`experiments.compare`), at "
              "each row group's settings (blank paper cells: as the row above)."), "",
             ("| data | a | b | paper: a - b | paper's p | t | p, two-sided [range] | p, one-sided a > b [range] | "
              "ours: settings | folder | pairs (seeds) | ours: a - b ± sd [95% CI] | paired p |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ours(folder: str | Path, a: str, b: str, dataset: str, tags: dict[str, str]) -> str:
        try:
            c = compare(f"{folder}:{dataset}_{a}:{tags.get(a, '')}", f"{folder}:{dataset}_{b}:{tags.get(b, '')}",
                        quiet=True)
        except ValueError:
            return f"`{folder}` | 0 | no runs | |"
        seeds = f"{c['n_paired']} ({_seed_ranges(c['seeds'])})"
        if c["n_paired"] < 2:  # one seed a side: a difference, no spread and no test
            return f"`{folder}` | {seeds} | {c['paired_diff']:+.3f} | — |"
        return (f"`{folder}` | {seeds} | {c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} "
                f"[{c['paired_ci_low']:+.3f}, {c['paired_ci_high']:+.3f}] | {c['paired_p']:.2g} |")

    for row in paper_pvalues():
        ds, a, b = row["dataset"], row["a"], row["b"]
        paper = (f"{row['diff']:+.3f} | {row['reported']} | {row['t']:.2f} | {row['p_two']:.2g} "
                 f"[{row['p_two_range'][0]:.2g}, {row['p_two_range'][1]:.2g}] | {row['p_one']:.2g} "
                 f"[{row['p_one_range'][0]:.2g}, {row['p_one_range'][1]:.2g}]")
        folder = folders.get(ds)
        dkm = DKM_FORM.get(b)
        with_dkm = bool(folder and dkm and a.startswith("ot") and any(Path(folder).glob(f"{ds}_{dkm}__*.json")))
        for other, name in [(b, b)] + ([(dkm, f"{dkm} (DKM's form)")] if with_dkm else []):
            for i, (label, tags) in enumerate(settings.get(ds, {"": {}}).items()):
                cells = paper if i == 0 else " | | | |"
                lines.append(f"| {ds} | {a} | {name} | {cells} | {label.split(':')[0]} | "
                             + (ours(folder, a, other, ds, tags) if folder else "| | | |"))
    return "\n".join(lines) + "\n"
