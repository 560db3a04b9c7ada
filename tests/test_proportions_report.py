"""The known-proportions report (:mod:`lit_otclust.lab.proportions`) against numpy and scipy on records written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from lit_otclust.lab.proportions import proportions_report

OPTIONS = {
    "title": "Known shares", "intro": "Test records.",
    "sets": {"geometric10": ["10 digits, geometric", 10, [0.0245, 0.2447]], "two_digits": ["1 and 2", 4, [0.2, 0.8]]},
    "methods": {"soft k-means": ["uniform_w", "mnist_soft_kmeans", ""],
                "OT, true w": ["true_w", "mnist_ot_p", ""],
                "OT, true w, by cost": ["true_w", "mnist_ot_p", "center_init=constrained"]},
    "pairs": [["OT, true w", "soft k-means"]],
    "potential": ["OT, true w"],
    "side": ["two_digits"],
}


def _record(folder: Path, config: str, seed: int, final: dict[str, float], grid: dict[str, str] | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    grid = grid or {}
    tags = "".join(f"__{k.split('.')[-1]}={v}" for k, v in sorted(grid.items()))
    name = f"{config}{tags}__seed={seed}"
    record = {"name": name, "config": config, "dataset": "mnist", "method": config[6:], "seed": seed, "grid": grid,
              "settings": dict(grid), "seconds": 1.0, "final": final, "curves": {"0": final}, "command": "test"}
    (folder / f"{name}.json").write_text(json.dumps(record))


def _final(acc: float, size_error: float | None, seed: int = 0) -> dict[str, float]:
    out = {"val/acc": acc, "val/acc_potential": acc - 0.010 - 0.002 * seed, "val/nmi": 0.5, "val/ari": 0.4, "val/size_min": 0.03,
           "val/size_max": 0.2}
    if size_error is not None:
        out.update({"val/size_error": size_error, "val/size_error_potential": size_error / 2})
    return out


@pytest.mark.parametrize("with_size_error", [True, False])
def test_the_table_and_the_paired_tests_are_numpys_and_scipys(tmp_path, with_size_error):
    """Means, sds and paired t-tests of the records as numpy and scipy compute them; the size-error columns only
    where every record logs it; the sets and methods without records are named; the figure is written."""
    soft, ot = [0.55, 0.60, 0.58], [0.66, 0.61, 0.70]
    for seed, (a, b) in enumerate(zip(soft, ot)):
        _record(tmp_path / "geometric10" / "uniform_w", "mnist_soft_kmeans", seed,
                _final(a, 0.15 if with_size_error else None))
        _record(tmp_path / "geometric10" / "true_w", "mnist_ot_p", seed, _final(b, 0.05 if with_size_error else None, seed))
    _record(tmp_path / "geometric10" / "true_w", "mnist_ot_p", 0, _final(0.7, 0.01 if with_size_error else None),
            {"phases.center_init": "constrained"})
    written = proportions_report(tmp_path, OPTIONS, "test")
    text = (tmp_path / "report.md").read_text()
    assert written == [tmp_path / "report.md", tmp_path / "accuracy_vs_imbalance.png"] and written[1].stat().st_size
    row = next(line for line in text.splitlines() if "| OT, true w | 3 |" in line)
    assert f"{np.mean(ot):.3f} ± {np.std(ot, ddof=1):.3f}" in row
    assert ("| 0.050 | 0.025 |" in row) == with_size_error and ("size error" in text) == with_size_error
    paired = stats.ttest_rel(ot, soft)
    diff = np.subtract(ot, soft)
    assert f"| OT, true w | soft k-means | {diff.mean():+.3f} ± {diff.std(ddof=1):.3f} | {paired.pvalue:.3g} |" in text
    assert "| OT, true w, potential rule | the same runs, nearest center | -0.012 ± 0.002 |" in text
    assert "| OT, true w, by cost | 1 | 0.700 |" in text  # one seed: a mean, no sd
    assert "Not run yet:\n\n- 1 and 2 (4): every method" in text and "- 10 digits" not in text


def test_not_run_yet_names_only_the_runs_the_study_plans(tmp_path):
    """With the study's runs given, a method the study does not run on a set is left out of "Not run yet", and a
    set where no planned method has run is "every method"; without them, every method of every set is named."""
    _record(tmp_path / "geometric10" / "uniform_w", "mnist_soft_kmeans", 0, _final(0.55, 0.15))
    planned = {(tmp_path / "geometric10" / "uniform_w", "mnist_soft_kmeans", frozenset()),
               (tmp_path / "geometric10" / "true_w", "mnist_ot_p", frozenset({"center_init=constrained"})),
               (tmp_path / "two_digits" / "true_w", "mnist_ot_p", frozenset())}
    proportions_report(tmp_path, OPTIONS, "test", planned)
    text = (tmp_path / "report.md").read_text()
    assert "- 10 digits, geometric (10): OT, true w, by cost\n" in text
    assert "- 1 and 2 (4): every method" in text
    proportions_report(tmp_path, OPTIONS, "test")
    assert "- 10 digits, geometric (10): OT, true w; OT, true w, by cost\n" in (tmp_path / "report.md").read_text()
