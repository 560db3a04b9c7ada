"""What ``python -m lit_otclust.experiments report`` writes: per folder of records ``table.md`` and the figures
(accuracy per epoch, accuracy against a grid key, :func:`figures`, :func:`report_folder`), and what a study file's
``report:`` asks for (:func:`report`): which classes merge over training (:func:`confusion_report`), whether a
short run predicts a long one (:func:`proxy_check`), paired tests (``compare.md``) and the report on known
cluster proportions (:mod:`lit_otclust.lab.proportions`). The numbers come from :mod:`lit_otclust.lab.stats`;
``lit_otclust.lab.experiments`` re-exports every name.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

from lit_otclust.lab.proportions import proportions_report
from lit_otclust.lab.stats import BASELINES, _has_tags, _tags, compare_table, load, table, table1
from lit_otclust.lab.studies import Study


def _save(fig, ax, path: Path) -> str:
    import matplotlib.pyplot as plt

    n = len(ax.get_legend_handles_labels()[1])
    if n > 8:  # a study's many variants: the legend goes below the axes, the figure grows by its rows
        width, height = fig.get_size_inches()
        legend = 0.17 * n  # inches, a row a curve: the axes keep their height and the figure grows by this
        total = height + legend
        fig.set_size_inches(width + 3, total)
        fig.subplots_adjust(left=0.08, right=0.97, top=1 - 0.45 / total, bottom=(legend + 0.6) / total)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.12), frameon=False)
    else:
        ax.legend(fontsize=8)
        fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def grid_runs(records: list[dict], dataset: str, key: str, grid_key: str,
               grid_default: float | None) -> dict[str, dict[float, dict[int, float]]]:
    """Final ``key`` per method, value of ``grid_key`` and seed. Runs without that key in their grid count at
    ``grid_default`` (the config's own value, e.g. the protocol's epsilon), or not at all if it is None; and only
    for a method with runs on the grid, with the seeds those runs have, so every point of a curve averages the
    same seeds (a protocol folder holds more seeds at the config's own value than its sweep runs elsewhere)."""
    # Runs that change another setting (e.g. the training solve) are not points of this curve.
    mine = [r for r in records if r["dataset"] == dataset and key in r["final"] and set(r["grid"]) <= {grid_key}]
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


def grid_points(records: list[dict], dataset: str, key: str, grid_key: str,
                 grid_default: float | None) -> dict[str, dict[float, list[float]]]:
    """:func:`grid_runs` without the seeds: the final values of each point, in seed order."""
    return {method: {x: [v for _, v in sorted(runs.items())] for x, runs in points.items()}
            for method, points in grid_runs(records, dataset, key, grid_key, grid_default).items()}


def grid_markdown(by: dict[str, dict[float, dict[int, float]]], key: str, grid_key: str) -> str:
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


def mean_curve(runs: list[list[float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The epochs (E,) that any run scored, and the mean and std over runs (E,) there (NaN: a run not scored), over
    the epochs every run reached. Epochs no run scored are left out, so a curve scored every 10 epochs is drawn
    through its points, not as NaN gaps."""
    n = min(len(y) for y in runs)
    y = np.array([r[:n] for r in runs], dtype=float)  # (runs, n)
    scored = ~np.isnan(y).all(0)
    y = y[:, scored]
    return np.flatnonzero(scored), np.nanmean(y, 0), np.nanstd(y, 0)


def figures(out: str | Path, key: str = "val/acc", grid_key: str | None = None,
            grid_default: float | None = None) -> list[str]:
    """PNGs in ``out``: accuracy vs epoch per method (mean over seeds, band = ± std) of the runs without
    ``grid_key`` in their grid, and, if ``grid_key`` is given (e.g. ``model.epsilon``), final accuracy
    vs that setting per method (Figure 2 style, mean ± std over seeds), the other runs at ``grid_default`` if
    given (see :func:`grid_runs`: the seeds of each point match). Returns the PNGs' paths."""
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
                epochs, mean, std = mean_curve(runs)
                # matplotlib cycles 10 colours: past them, a new line style keeps every curve its own. A curve of
                # few points (scored every 10 epochs, or once) gets markers, or a lone point would not show.
                ax.plot(epochs, mean, label=f"{method} ({len(runs)} runs)", linestyle=("-", "--", ":")[i // 10 % 3],
                        marker="o" if len(epochs) <= 40 else None, markersize=3)
                ax.fill_between(epochs, mean - std, mean + std, alpha=0.2)
            ax.set(xlabel="epoch", ylabel=key, title=f"{ds}: {key} per epoch (mean ± std over seeds)")
            written.append(_save(fig, ax, Path(out) / f"figure1_{ds}.png"))
        if grid_key:
            by = grid_points(records, ds, key, grid_key, grid_default)
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
                     source: str = "", tags: dict[str, str] | None = None) -> str:
    """Which classes merge or split over training: per seed, method and epoch of the confusion counts the records
    keep (``record["confusion"]``), the accuracy and every class b of which at least ``share`` of the images sit in
    the cluster matched to another class a, as ``b>a 45%``. Of each method, the runs with the grid settings
    ``tags[method]`` names (``key=value,...`` as in run names); without, the runs without grid settings."""
    tags = tags or {}
    runs: dict[int, dict[str, dict]] = defaultdict(dict)  # seed -> method -> record
    for record in records:
        method = record["method"]
        if record.get("confusion") and method in methods and _has_tags(record, tags.get(method, "")):
            runs[record["seed"]][method] = record
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


_REPORT_KEYS = {"key", "baselines", "grid_key", "grid_default", "table1", "confusion", "proxy_check", "compare",
                "proportions"}


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
            path.write_text(grid_markdown(grid_runs(records, ds, key, grid_key, grid_default), key, grid_key))
            written.append(path)
    return written


def report(study: Study) -> list[Path]:
    """Write a study's report into its folders; returns the files written. Every folder of records gets
    :func:`report_folder`; the study file's ``report:`` mapping adds, in ``out``:

    - ``key`` (``val/acc``), ``baselines`` (:data:`BASELINES`; null: none), ``grid_key``, ``grid_default``: for
      :func:`report_folder`;
    - ``table1``: ``{file, dataset}``, Table 1 of ``out`` by row group, the shipped configs first (:func:`table1`);
    - ``confusion``: a list of ``{file, methods, epochs[, share, tags]}``, each a :func:`confusion_report`;
    - ``proxy_check``: ``{file[, at, proxy]}``, a :func:`proxy_check` of ``out``;
    - ``compare``: a list of ``{a, b[, key, epoch, key_b, epoch_b, against]}``, paired tests (:func:`compare`) in
      ``compare.md``;
    - ``proportions``: a study on known cluster proportions, its ``report.md`` and figure
      (:func:`lit_otclust.lab.proportions.proportions_report`, whose docstring gives the keys).
    """
    options = study.report
    if set(options) - _REPORT_KEYS:
        raise ValueError(f"{study.path}: report keys {sorted(set(options) - _REPORT_KEYS)} unknown "
                         f"(keys: {sorted(_REPORT_KEYS)})")
    with_records = [folder for folder in study.folders if any(folder.glob("*.json"))]
    if not with_records:
        raise ValueError(f"{study.path}: no records in {', '.join(map(str, study.folders))} to report yet; "
                         f"train them first: python -m lit_otclust.experiments run {study.path}")
    key = options.get("key", "val/acc")
    source = f"python -m lit_otclust.experiments report {study.path}"
    written = []
    for folder in with_records:
        written += report_folder(folder, key, options.get("baselines", BASELINES), options.get("grid_key"),
                                 options.get("grid_default"))
    if "table1" in options:
        spec = options["table1"]
        path = study.out / spec["file"]
        path.write_text(table1(study.out, spec["dataset"], baselines=options.get("baselines", BASELINES)))
        written.append(path)
    for spec in options.get("confusion", []):
        path = study.out / spec["file"]
        path.write_text(confusion_report(load(study.out), spec["methods"], spec["epochs"], spec.get("share", 0.15),
                                         source, spec.get("tags")))
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
    if "proportions" in options:
        planned = {(run.out, Path(run.config).stem, frozenset(run.tags)) for run in study.runs}
        written += proportions_report(study.out, options["proportions"], source, planned)
    return written
