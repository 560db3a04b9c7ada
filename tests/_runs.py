"""Paths and log readers shared by the tests that run fits (here, so that no test module imports another)."""

from __future__ import annotations

from pathlib import Path

from lit_otclust.runfiles import read_curves

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "configs" / "smoke.yaml")


def epoch_metrics(root: Path) -> dict[int, dict[str, float]]:
    """Per-epoch rows of the newest CSV log, merged by epoch."""
    return read_curves(sorted((root / "csv").glob("version_*/metrics.csv"))[-1], keys=None)
