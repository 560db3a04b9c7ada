"""The report of a study on known cluster proportions: per data set (its largest / smallest class ratio) and method,
accuracy (both assignment rules), NMI, ARI, the cluster sizes and, where the records log it, the size error (the
largest |cluster share - its matched class's share|), then paired tests, and a figure of accuracy (and size error)
against the ratio. What the study compares is data in its file (``report: proportions:``), so a new study of the
question needs no code:

.. code-block:: yaml

    report:
      proportions:
        title: Known non-uniform cluster sizes
        intro: 40-epoch proxy, no pre-training, seeds 0-4; ...
        balanced: results/study_recipe   # optional: balanced MNIST's runs, whose uniform w is the true w
        sets:     {geometric10: [10 digits, geometric, 10, [0.0245, 0.2447]], ...}   # folder: label, ratio, w's range
        methods:  {OT, true w: [true_w, mnist_ot_p, ""], ...}                        # label: folder, config, tags
        pairs:    [[OT, true w, soft k-means], ...]                                  # a - b, paired by seed
        potential: [OT, true w]            # methods also tested under the potential rule against the nearest center
        side: [two_digits]                 # data sets drawn in the figure's right panel
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lit_otclust.lab.stats import select, _tag_list, compare


def _spec(out: Path, balanced: str | None, name: str, folder: str, config: str, tags: str) -> str:
    """The ``DIR:CONFIG[:tags]`` of a method's runs on data set ``name``. On balanced MNIST the uniform w is the
    true w and every size order matches it, so the true-w runs are the uniform-w runs; those, soft k-means and
    unbalanced OT are the ``balanced`` folder's (the recipe study's, the same commands)."""
    if name == "balanced" and balanced is not None and folder != "misspecified_w":
        return f"{balanced}:{config}" + (f":{tags}" if tags and folder != "true_w" else "")
    return f"{out / name / folder}:{config}" + (f":{tags}" if tags else "")


def proportions_report(out: Path, options: dict[str, Any], source: str,
                       planned: set[tuple[Path, str, frozenset[str]]] | None = None) -> list[Path]:
    """``report.md`` and ``accuracy_vs_imbalance.png`` in ``out`` from the records under ``out/<data set>/<w>/``
    (module docstring for ``options``). Sets or methods without runs are left out; those the study runs (``planned``:
    its runs' folder, config stem and grid tags; None: every set and method) are named as not run yet."""
    sets = {name: (label, float(ratio), tuple(w)) for name, (label, ratio, w) in options["sets"].items()}
    methods = {label: tuple(spec) for label, spec in options["methods"].items()}
    balanced = options.get("balanced")
    records, missing, ran = {}, {}, set()
    for name, (label, ratio, _) in sets.items():
        data = f"{label} ({ratio:g})"
        for method, (folder, config, tags) in methods.items():
            try:
                records[name, method] = select(_spec(out, balanced, name, folder, config, tags))
                ran.add(data)
            except ValueError:
                if planned is None or name == "balanced" or (
                        out / name / folder, config, frozenset(_tag_list(tags))) in planned:
                    missing.setdefault(data, []).append(method)
    # The size error came with later records: its columns only where every row has it.
    sized = bool(records) and all("val/size_error" in r["final"] for rs in records.values() for r in rs)
    header = "| data | largest/smallest | method | runs | acc mean ± sd | acc, potential rule | NMI | ARI |"
    header += " size error | size error, potential rule |" if sized else ""
    header += " smallest cluster (true) | largest cluster (true) |"
    lines = [f"# {options['title']}", "", f"{options['intro']} Written by `{source}` from the run records.", "",
             header, "|" + "---|" * (header.count("|") - 1)]
    acc, size_error = {}, {}
    for name, (label, ratio, (w_min, w_max)) in sets.items():
        for method, (folder, config, _) in methods.items():
            if (name, method) not in records:
                continue
            rs = records[name, method]
            keys = ("val/acc", "val/nmi", "val/ari", "val/size_min", "val/size_max") + (
                ("val/size_error", "val/size_error_potential") if sized else ())
            f = {k: np.array([r["final"][k] for r in rs]) for k in keys}
            # argmin_k ||z - mu_k||^2 - g_k, g the running mean of the Sinkhorn cluster potentials: the rule that
            # keeps OT's sizes (soft k-means has g = 0, so it equals acc there and is not repeated).
            ot = config.startswith("mnist_ot")
            potential = f"{np.mean([r['final']['val/acc_potential'] for r in rs]):.3f}" if ot else "—"
            acc[name, method] = f["val/acc"]
            sd = f" ± {f['val/acc'].std(ddof=1):.3f}" if len(rs) > 1 else ""
            same = " (the uniform-w runs)" if name == "balanced" and folder == "true_w" else ""
            row = (f"| {label} | {ratio:g} | {method}{same} | {len(rs)} | {f['val/acc'].mean():.3f}{sd} | "
                   f"{potential} | {f['val/nmi'].mean():.3f} | {f['val/ari'].mean():.3f} | ")
            if sized:
                size_error[name, method] = f["val/size_error"]
                row += (f"{f['val/size_error'].mean():.3f} | "
                        + (f"{f['val/size_error_potential'].mean():.3f} | " if ot else "— | "))
            lines.append(row + f"{f['val/size_min'].mean():.3f} ({w_min:g}) | {f['val/size_max'].mean():.3f} "
                         f"({w_max:g}) |")
    lines += ["", "Paired by seed (`lit_otclust.experiments.compare`: paired t-test over the seeds both have):", "",
              "| data | largest/smallest | a | b | mean a - b ± sd | paired p |", "|---|---|---|---|---|---|"]
    for name, (label, ratio, _) in sets.items():
        spec = {m: _spec(out, balanced, name, *methods[m]) for m in methods}
        for a, b in options.get("pairs", []):
            if (name, a) in acc and (name, b) in acc and spec[a] != spec[b]:
                lines.append(f"| {label} | {ratio:g} | {a} | {b} | {_paired(compare(spec[a], spec[b], quiet=True))} |")
        for method in options.get("potential", []):  # the same runs under the two assignment rules
            if (name, method) in acc and name != "balanced":
                c = compare(spec[method], spec[method], key="val/acc_potential", key_b="val/acc", quiet=True)
                lines.append(f"| {label} | {ratio:g} | {method}, potential rule | the same runs, nearest center | "
                             f"{_paired(c)} |")
    if missing:  # a line per data set; "every method" where none has run
        lines += ["", "Not run yet:", ""] + [
            f"- {data}: " + ("every method" if data not in ran else "; ".join(left))
            for data, left in missing.items()]
    lines += ["", "![accuracy against imbalance](accuracy_vs_imbalance.png)"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _figure(sets, list(methods), acc, size_error, options.get("side", []), out / "accuracy_vs_imbalance.png")
    return [out / "report.md", out / "accuracy_vs_imbalance.png"]


def _paired(c: dict[str, Any]) -> str:
    """A :func:`compare` result as the table's last two cells; one seed has a difference and no test."""
    if c["n_paired"] < 2:
        return f"{c['paired_diff']:+.3f} (seed {c['seeds'][0]} only) | —"
    return f"{c['paired_diff']:+.3f} ± {c['paired_sd']:.3f} | {c['paired_p']:.3g}"


def _style(i: int) -> dict[str, str]:
    """Method i's colour and marker: the 10 default colours, then again with another marker, so no two share both."""
    return {"color": f"C{i % 10}", "marker": "osD^v"[i // 10 % 5]}


def _figure(sets: dict, methods: list[str], acc: dict, size_error: dict, side: list[str], path: Path) -> None:
    """(a) accuracy against largest/smallest, a line per method, over the sets not in ``side``; (b) the ``side``
    sets, a point per method; with ``size_error``, a second row of the same for the size error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    rows = [("accuracy", acc)] + ([("size error", size_error)] if size_error else [])
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 4.2 * len(rows)), gridspec_kw={"width_ratios": [1.6, 1]},
                             squeeze=False)
    ratios = sorted({sets[n][1] for n in sets if n not in side})
    for (what, values), (left, right) in zip(rows, axes):
        for i, method in enumerate(methods):
            pts = [(sets[n][1], values[n, method]) for n in sets if n not in side and (n, method) in values]
            if pts:
                x = np.array([p[0] for p in pts]) * (1 + 0.02 * (i - 2.5))  # an offset so error bars do not overlap
                left.errorbar(x, [a.mean() for _, a in pts], yerr=[a.std(ddof=1) if len(a) > 1 else 0 for _, a in pts],
                              capsize=3, label=method, **_style(i))
        shown = [m for m in methods if any((n, m) in values for n in side)]  # (b) names only what ran there
        for j, method in enumerate(shown):
            for n in side:
                if (n, method) in values:
                    a = values[n, method]
                    right.errorbar([j], [a.mean()], yerr=[a.std(ddof=1) if len(a) > 1 else 0], capsize=3,
                                   **_style(methods.index(method)))
                    right.scatter(np.full(len(a), j), a, s=8, color="gray", alpha=0.6)
        left.set_xscale("log")
        left.set_xticks(ratios, [f"{r:g}" for r in ratios])
        left.xaxis.set_minor_formatter(NullFormatter())  # the ratios only, not 4 x 10^0
        left.set(xlabel="largest / smallest class", ylabel=f"{what} (mean ± sd over seeds)",
                 title=f"(a) 10 digits, geometric class proportions: {what}" if what != "accuracy" else
                 "(a) 10 digits, geometric class proportions")
        right.set_xticks(range(len(shown)), [m.replace(", ", ",\n", 1) for m in shown], fontsize=6, rotation=30,
                         ha="right")
        if not shown:
            right.text(0.5, 0.5, "not run yet", ha="center", va="center", transform=right.transAxes)
        right.set(title=f"(b) {', '.join(sets[n][0] for n in side)}", ylabel=what)
    handles, labels = axes[0][0].get_legend_handles_labels()
    rows_of_legend = -(-len(labels) // 2)
    if labels:  # one legend for every panel, under them, so that it covers no point
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, (0.16 * rows_of_legend + 0.1) / fig.get_figheight(), 1, 1))  # inches to a fraction
    fig.savefig(path, dpi=120)
    plt.close(fig)
