"""Sweeps, aggregation and figures for the paper's Table 1 and Figures 1-2.

    python -m lit_otclust.experiments run --out results/table1 --configs mnist_ae_kmeans mnist_ot \\
        --seeds 0 1 2 --set trainer.max_epochs=20 --set data.init_args.data_dir=../shared/data
    python -m lit_otclust.experiments table --out results/table1
    python -m lit_otclust.experiments figures --out results/table1

``run`` launches one ``python -m lit_otclust fit`` per (config, grid point, seed), ``jobs`` at a
time, each pinned to ``threads`` CPU threads. A run whose result file exists is skipped, and an
interrupted run resumes from its ``last.ckpt``, so a partly done sweep is finished by running the
same command again. Each run leaves ``<out>/<run>.json``: its settings, the final metrics and
the per-epoch curves (from the CSV log), so nothing depends on W&B.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
CURVE_KEYS = ("val/acc", "val/acc_potential", "val/nmi", "val/ari", "heldout/acc", "train/loss",
              "train/recon", "train/cluster", "train/sinkhorn_iters", "train/plan_moved", "train/sinkhorn_unconverged",
              "val/size_min", "val/size_max")

# Table 1 of the paper: mean, std, min, max of the accuracy over 50 runs of 200 epochs.
PAPER = {
    "mnist": {"kmeans": (0.513, None, None, None), "ae_kmeans": (0.801, 0.025, 0.765, 0.912),
              "soft_kmeans": (0.810, 0.033, 0.677, 0.883), "soft_kmeans_p": (0.837, 0.032, 0.781, 0.923),
              "ot": (0.851, 0.032, 0.771, 0.932), "ot_p": (0.846, 0.040, 0.759, 0.928)},
    "cifar10": {"kmeans": (0.206, None, None, None), "ae_kmeans": (0.237, 0.005, 0.230, 0.259),
                "soft_kmeans": (0.239, 0.008, 0.227, 0.257), "soft_kmeans_p": (0.243, 0.010, 0.227, 0.261),
                "ot": (0.243, 0.007, 0.232, 0.260), "ot_p": (0.244, 0.009, 0.230, 0.266)},
}
METHODS = list(PAPER["mnist"])
# The paper's Welch t-tests: (a, b) pairs it reports p-values for.
COMPARISONS = [("ot", "soft_kmeans"), ("ot_p", "soft_kmeans_p"), ("ot_p", "ot"), ("soft_kmeans_p", "soft_kmeans")]


def _parse_assignments(items: list[str], what: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise ValueError(f"{what} {item!r} must look like key=value{',value2' if what == '--grid' else ''}")
        out[key] = values.split(",") if what == "--grid" else [values]
    return out


def _tags(grid: dict[str, str]) -> list[str]:
    """``key=value`` per grid setting, by the key's last component: ``model.epsilon`` -> ``epsilon=0.1``."""
    return [f"{k.split('.')[-1]}={v}" for k, v in sorted(grid.items())]


def _run_name(config: str, point: dict[str, str], seed: int) -> str:
    return "__".join([config, *_tags(point), f"seed={seed}"])


def read_curves(csv_path: Path, keys: tuple[str, ...] | None = CURVE_KEYS) -> dict[int, dict[str, float]]:
    """Per-epoch metrics of a Lightning CSV log, one dict per epoch (only ``keys``; all if None)."""
    rows: dict[int, dict[str, float]] = defaultdict(dict)
    with open(csv_path) as fh:
        for row in csv.DictReader(fh):
            if row.get("epoch"):
                rows[int(row["epoch"])].update({k: float(v) for k, v in row.items()
                                                if v and k != "epoch" and (keys is None or k in keys)})
    return dict(sorted(rows.items()))


def read_confusions(folder: Path) -> dict[int, dict[str, list]]:
    """The confusion counts :class:`~lit_otclust.figures.ClusterFigures` wrote in ``folder``, by epoch (0-based)."""
    from lit_otclust.figures import read_confusion_csv  # here: the figures module imports Lightning and matplotlib

    files = Path(folder).glob("confusion_epoch*.csv")
    return {int(p.stem.removeprefix("confusion_epoch")): read_confusion_csv(p) for p in sorted(files)}


def _commit() -> str | None:
    """The code's git commit (with ``+dirty`` if the code or the configs have changes), so a record names what
    ran. Results written beside the runs (a sweep's tables) do not make the code dirty."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "lit_otclust", "configs"],
                               cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _attempts_seconds(root: Path, now: float, done: bool) -> float:
    """Wall seconds of a run over all its attempts, kept in ``root/attempts.json`` as [start, end] pairs.

    Called with ``done=False`` when an attempt starts and ``done=True`` when it ends. An attempt killed on
    the way (the session stopped) never wrote its end: its useful work ended at its last checkpoint, which
    the next attempt resumes from, so ``last.ckpt``'s modification time closes it (the epochs after it are
    redone and counted once). Returns the sum so far (the attempts before this one when starting)."""
    path = root / "attempts.json"
    attempts = json.loads(path.read_text()) if path.exists() else []
    last_ckpt = root / "checkpoints" / "last.ckpt"
    if attempts and attempts[-1][1] is None and not done:
        attempts[-1][1] = last_ckpt.stat().st_mtime if last_ckpt.exists() else attempts[-1][0]
    if done:
        attempts[-1][1] = now
    else:
        attempts.append([now, None])
    path.write_text(json.dumps(attempts) + "\n")
    return sum(end - start for start, end in attempts if end is not None)


def _run_one(out: Path, config: str, point: dict[str, str], fixed: dict[str, str], seed: int, threads: int,
             wandb: bool) -> str:
    name = _run_name(config, point, seed)
    result = out / f"{name}.json"
    if result.exists():
        return f"skip {name}"
    root = out / "runs" / name
    cmd = [sys.executable, "-m", "lit_otclust", "fit", "--config", str(REPO / "configs" / f"{config}.yaml"),
           "--seed_everything", str(seed), "--trainer.default_root_dir", str(root),
           "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    for key, value in {**fixed, **point}.items():
        cmd += [f"--{key}", value]
    if (root / "checkpoints" / "last.ckpt").exists():
        cmd += ["--ckpt_path", "last"]  # an interrupted run continues
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "WANDB_MODE": os.environ.get("WANDB_MODE", "offline") if wandb else "disabled", "WANDB_SILENT": "true"}
    # The record's command, as a user types it in a fresh clone: relative config, no interpreter path.
    portable = ["python", *cmd[1:5], f"configs/{config}.yaml", *cmd[6:]]
    root.mkdir(parents=True, exist_ok=True)
    _attempts_seconds(root, time.time(), done=False)
    with open(root / "stdout.log", "a") as log:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        return f"FAILED {name} (exit {proc.returncode}; see {root / 'stdout.log'})"
    logs = sorted((root / "csv").glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
    curves: dict[int, dict[str, float]] = {}
    for log_file in logs:  # a resumed run writes a new version: later versions win
        curves.update(read_curves(log_file))
    dataset, _, method = config.partition("_")
    record = {"name": name, "config": config, "dataset": dataset, "method": method, "seed": seed,
              "grid": point, "fixed": fixed, "seconds": round(_attempts_seconds(root, time.time(), done=True), 1),
              "final": curves[max(curves)] if curves else {}, "curves": curves, "command": " ".join(portable),
              "commit": _commit(), "omp_num_threads": threads, "torch": metadata.version("torch")}
    confusion = read_confusions(root / "figures")
    if confusion:  # clusters x classes every `figures.every_n_epochs` epochs: which classes merge or split, and when
        record["confusion"] = confusion
    result.write_text(json.dumps(record, indent=1) + "\n")
    return f"done {name}: val/acc {record['final'].get('val/acc', float('nan')):.4f} in {record['seconds']:.0f}s"


def run(out: str, configs: list[str], seeds: list[int] = (0,), grid: list[str] = (), set: list[str] = (),  # noqa: A002
        jobs: int = 1, threads: int = 1, wandb: bool = False) -> None:
    """Run every (config, grid point, seed) that has no result file yet in ``out``.

    Args:
        out: the sweep's folder (results as ``<run>.json``; logs and checkpoints under ``runs/``).
        configs: config names in configs/, e.g. ``mnist_ot``.
        seeds: seeds (``seed_everything``: weights, shuffling, k-means).
        grid: ``key=v1,v2``: one run per value (several keys: their product), e.g. ``model.epsilon=0.01,0.1``.
        set: ``key=value``: overrides for every run, e.g. ``trainer.max_epochs=20``.
        jobs: runs in parallel.
        threads: CPU threads per run.
        wandb: also log each run to W&B (offline without credentials).
    """
    for config in configs:
        if not (REPO / "configs" / f"{config}.yaml").is_file():
            raise FileNotFoundError(f"config {config!r} not found: expected configs/{config}.yaml")
    grid_values = _parse_assignments(grid, "--grid")
    fixed = {k: v[0] for k, v in _parse_assignments(set, "--set").items()}
    points = [dict(zip(grid_values, combo)) for combo in itertools.product(*grid_values.values())]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks = [(config, point, seed) for seed in seeds for config in configs for point in points]
    print(f"{len(tasks)} runs in {out_dir}", flush=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for line in pool.map(lambda t: _run_one(out_dir, t[0], t[1], fixed, t[2], threads, wandb), tasks):
            print(line, flush=True)


def load(out: str | Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(out).glob("*.json"))]


def _group(records: list[dict], key: str = "val/acc") -> dict[tuple, list[float]]:
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        if key in r["final"]:
            groups[(r["dataset"], r["method"], json.dumps(r["grid"], sort_keys=True))].append(r["final"][key])
    return groups


def table(out: str, key: str = "val/acc", baselines: str | None = "results/kmeans_raw", write: bool = True) -> str:
    """Markdown: per data set and method, mean (± std) and [min, max] beside the paper, then Welch t-tests.

    Args:
        out: the sweep's folder.
        key: the metric to tabulate (``val/acc``: accuracy on the fitted samples, the paper's).
        baselines: a folder of ``python -m lit_otclust.baselines`` JSON outputs (k-means on pixels).
        write: also write ``<out>/table.md`` (the ``table`` command does; a notebook showing it does not).
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
    lines = [f"| data | method | settings | runs | ours: mean (± std) | ours: [min, max] | paper: mean (± std) | paper: [min, max] |",
             "|---|---|---|---|---|---|---|---|"]
    for (ds, method, grid), accs in sorted(groups.items(), key=lambda kv: (kv[0][0], METHODS.index(kv[0][1]) if kv[0][1] in METHODS else 99, kv[0][2])):
        a = np.array(accs)
        pm, ps, pmin, pmax = PAPER.get(ds, {}).get(method, (None,) * 4)
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
    text = "\n".join(lines) + "\n"
    if write:
        Path(out, "table.md").write_text(text)
        print(text)
    return text


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
            against: float | None = None) -> dict[str, float]:
    """Effect of a over b, paired by seed: mean difference ± its std, its 95% confidence interval (t), the
    paired t-test and Welch p-values.

    Args:
        a, b: ``DIR:CONFIG[:key=value,...]``, e.g. ``results/study_recipe:mnist_ot:reg_m_start=0.01``.
        key: the metric. epoch: compare at this epoch of the curves instead of the last one.
        key_b: b's metric, if not ``key`` (e.g. two assignment rules of the same runs).
        against: a difference claimed elsewhere (e.g. the paper's +0.041): also the paired t-test of
            "the mean difference is ``against``" (``against_p``), and the power these pairs had to detect a
            difference that large at the 5% level, given their spread (``against_power``, :func:`paired_power`).
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
    at = "final" if epoch is None else f"epoch {epoch}"
    print(f"{key}{'' if key_b in (None, key) else ' vs ' + key_b} at {at}: a {out['mean_a']:.3f} ({len(runs_a)} runs), b {out['mean_b']:.3f} ({len(runs_b)} runs); "
          f"paired over seeds {seeds}: {out['paired_diff']:+.3f} ± {out['paired_sd']:.3f} (95% CI "
          f"[{out['paired_ci_low']:+.3f}, {out['paired_ci_high']:+.3f}]), p = {out['paired_p']:.3g}; "
          f"Welch p = {out['welch_p']:.3g}")
    if "against" in out:
        print(f"against a difference of {against:+.3f}: paired p = {out['against_p']:.3g}; these {len(diff)} pairs had "
              f"power {out['against_power']:.2f} to detect it at the 5% level")
    return out


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


def figures(out: str, key: str = "val/acc", grid_key: str | None = None,
            grid_default: float | None = None, write_table: bool = False) -> list[str]:
    """PNGs: accuracy vs epoch per method (mean over seeds, band = ± std) of the runs without
    ``grid_key`` in their grid, and, if ``grid_key`` is given (e.g. ``model.epsilon``), final accuracy
    vs that setting per method (Figure 2 style, mean ± std over seeds), the other runs at ``grid_default`` if
    given (see :func:`_grid_runs`: the seeds of each point match). Returns the PNGs' paths; with ``write_table``
    (the command line's ``figures``), Figure 2's numbers also go to ``figure2_<data>.md``, which a notebook's
    call leaves alone, like :func:`table`'s ``write``.
    """
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
            if write_table:
                table_path = Path(out) / f"figure2_{ds}.md"
                table_path.write_text(_grid_markdown(_grid_runs(records, ds, key, grid_key, grid_default), key, grid_key))
                print(table_path)
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
    print("\n".join(written))
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lit_otclust.experiments", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help=run.__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--configs", nargs="+", required=True)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--grid", nargs="*", default=[], metavar="KEY=V1,V2")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--wandb", action="store_true")
    p = sub.add_parser("table", help=table.__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--key", default="val/acc")
    p.add_argument("--baselines", default="results/kmeans_raw")
    p = sub.add_parser("figures", help=figures.__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--key", default="val/acc")
    p.add_argument("--grid_key", default=None)
    p.add_argument("--grid_default", type=float, default=None)
    p = sub.add_parser("compare", help=compare.__doc__.splitlines()[0])
    p.add_argument("--a", required=True, metavar="DIR:CONFIG[:key=value,...]")
    p.add_argument("--b", required=True, metavar="DIR:CONFIG[:key=value,...]")
    p.add_argument("--key", default="val/acc")
    p.add_argument("--epoch", type=int, default=None)
    p.add_argument("--key_b", default=None)
    p.add_argument("--against", type=float, default=None, help="a claimed difference to test (e.g. the paper's)")
    args = vars(parser.parse_args(argv))
    if args["command"] == "figures":
        args["write_table"] = True
    {"run": run, "table": table, "figures": figures, "compare": compare}[args.pop("command")](**args)


if __name__ == "__main__":
    main()
