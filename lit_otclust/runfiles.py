"""The files a run folder holds, written by training and read back by the logger and the lab: one module per format,
so neither imports the other.

- ``csv/version_*/metrics.csv``: Lightning's CSV log, one version per attempt (:func:`csv_logs`, :func:`read_curves`);
- ``figures/confusion_<tag>.csv``: clusters x classes counts in the Hungarian-matched order (:func:`confusion_csv`,
  :func:`read_confusion_csv`, :func:`read_confusions`), written by :class:`lit_otclust.figures.ClusterFigures`.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only annotated: the lab's dry run and SLURM launcher read these files without torch
    from torch import Tensor


def csv_logs(folder: Path) -> list[Path]:
    """The ``metrics.csv`` of each version of the Lightning CSV log in ``folder``, oldest first: a resumed run (and a
    shared pre-training's rows, :mod:`lit_otclust.pretrain_cache`) adds a version, and later versions win."""
    return sorted(Path(folder).glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))


def read_curves(csv_path: Path, keys: Sequence[str] | None = None) -> dict[int, dict[str, float]]:
    """Per-epoch metrics of a Lightning CSV log, one dict per epoch (only ``keys``; all if None)."""
    rows: dict[int, dict[str, float]] = defaultdict(dict)
    with open(csv_path) as fh:
        for row in csv.DictReader(fh):
            if row.get("epoch"):
                rows[int(row["epoch"])].update({k: float(v) for k, v in row.items()
                                                if v and k != "epoch" and (keys is None or k in keys)})
    return dict(sorted(rows.items()))


def confusion_csv(matrix: Tensor, order: Tensor, matching: Tensor) -> str:
    """The output of :func:`lit_otclust.plots.matched_confusion` as CSV text: a header
    ``cluster,matched_class,0,1,...,C-1``, then one row per cluster in ``order`` (its index, its matched class or -1,
    its counts per class)."""
    num_classes = matrix.shape[1]
    lines = [",".join(["cluster", "matched_class", *map(str, range(num_classes))])]
    for k, counts in zip(order.tolist(), matrix.tolist()):
        lines.append(",".join(map(str, [k, int(matching[k]), *counts])))
    return "\n".join(lines) + "\n"


def read_confusion_csv(path: Path) -> dict[str, list]:
    """A file written from :func:`confusion_csv`: ``{"cluster": (K,), "matched_class": (K,), "counts": (K, C)}``."""
    header, *rows = [line.split(",") for line in Path(path).read_text().splitlines() if line]
    if header[:2] != ["cluster", "matched_class"]:
        raise ValueError(f"{path}: not a confusion CSV (header {header[:2]})")
    table = [[int(v) for v in row] for row in rows]
    return {"cluster": [r[0] for r in table], "matched_class": [r[1] for r in table], "counts": [r[2:] for r in table]}


def read_confusions(folder: Path) -> dict[int, dict[str, list]]:
    """The per-epoch confusion counts in a run's ``figures`` folder, by epoch (0-based)."""
    files = Path(folder).glob("confusion_epoch*.csv")
    return {int(p.stem.removeprefix("confusion_epoch")): read_confusion_csv(p) for p in sorted(files)}
