"""The sweep tool's aggregation, and the results notebook executed on a tiny result set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient
from scipy import stats

from lit_otclust import experiments

REPO = Path(__file__).resolve().parents[1]


def write_runs(folder: Path, accs: dict[str, list[float]]) -> None:
    """Result files in the schema ``experiments.run`` writes, with 3 epochs of curves each."""
    folder.mkdir(parents=True, exist_ok=True)
    for method, values in accs.items():
        for seed, acc in enumerate(values):
            curves = {str(e): {"val/acc": acc * (e + 1) / 3, "train/loss": 10.0 - e} for e in range(3)}
            record = {"name": f"mnist_{method}__seed={seed}", "config": f"mnist_{method}", "dataset": "mnist",
                      "method": method, "seed": seed, "grid": {}, "fixed": {}, "seconds": 1.0,
                      "final": curves["2"], "curves": curves, "command": "test"}
            (folder / f"{record['name']}.json").write_text(json.dumps(record))


def test_table_reports_mean_std_range_and_welch_test(tmp_path):
    ot, skm = [0.80, 0.85, 0.90], [0.70, 0.72, 0.80]
    write_runs(tmp_path, {"ot": ot, "soft_kmeans": skm})
    text = experiments.table(str(tmp_path), baselines=None)
    assert f"{np.mean(ot):.3f} (± {np.std(ot, ddof=1):.3f}) | [0.800, 0.900] | 0.851 (± 0.032)" in text
    p = stats.ttest_ind(ot, skm, equal_var=False).pvalue
    assert f"| ot | soft_kmeans | {np.mean(ot) - np.mean(skm):+.3f} | {p:.3g} |" in text
    # The per-method means of the other metrics: acc logged, the rest absent in these records.
    assert f"| mnist | ot |  | {np.mean(ot):.3f} | — | — |" in text


def test_bad_override_names_itself(tmp_path):
    with pytest.raises(ValueError, match="key=value"):
        experiments.run(str(tmp_path), ["mnist_ot"], set=["trainer.max_epochs"])
    with pytest.raises(FileNotFoundError, match="configs/mnist_nope.yaml"):
        experiments.run(str(tmp_path), ["mnist_nope"])


def test_notebook_runs_on_a_tiny_result_set(tmp_path, monkeypatch):
    write_runs(tmp_path / "sweep", {"ot": [0.8, 0.9], "ae_kmeans": [0.7, 0.75]})
    monkeypatch.setenv("LIT_OTCLUST_RESULTS", str(tmp_path / "sweep"))
    nb = nbformat.read(REPO / "notebooks" / "results.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("4 runs" in o.get("text", "") for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs)
    # The notebook shows the table experiments.table renders from the same records: means, stds, ranges.
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert f"0.850 (± {np.std([0.8, 0.9], ddof=1):.3f}) | [0.800, 0.900]" in text
    assert f"0.725 (± {np.std([0.7, 0.75], ddof=1):.3f}) | [0.700, 0.750]" in text
    assert (tmp_path / "sweep" / "figure1_mnist.png").stat().st_size > 1000


def test_run_writes_the_record_of_a_real_fit(data_dir, tmp_path):
    """``run`` on the smoke config: the record holds what the fit's CSV log holds, and a portable command."""
    experiments.run(str(tmp_path), ["smoke"], seeds=[1], set=[f"data.init_args.data_dir={data_dir}",
                                                                 "trainer.max_epochs=2", "figures.every_n_epochs=1"])
    (record,) = experiments.load(tmp_path)
    assert record["seed"] == 1 and sorted(record["curves"], key=int) == ["0", "1"]
    csv_rows = experiments.read_curves(next((tmp_path / "runs").glob("*/csv/version_0/metrics.csv")))
    assert record["final"]["val/acc"] == csv_rows[1]["val/acc"] > 0.2
    assert record["command"].startswith("python -m lit_otclust fit --config configs/smoke.yaml --seed_everything 1")
    # The confusion counts drawn every epoch land in the record by epoch: all 1000 images, and the matched
    # counts (the diagonal) give the epoch's logged accuracy.
    assert sorted(record["confusion"], key=int) == ["0", "1"]
    for epoch, table in record["confusion"].items():
        counts = np.array(table["counts"])
        assert counts.shape == (10, 10) and counts.sum() == 1000
        assert np.trace(counts) / 1000 == pytest.approx(record["curves"][epoch]["val/acc"], abs=1e-6)
    assert "skip" in experiments._run_one(tmp_path, "smoke", {}, {}, 1, 1, False)  # a finished run is not redone


def test_compare_pairs_runs_by_seed(tmp_path):
    write_runs(tmp_path, {"ot": [0.80, 0.85, 0.90], "soft_kmeans": [0.70, 0.72, 0.95]})
    out = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans")
    assert out["n_paired"] == 3 and out["paired_diff"] == pytest.approx(np.mean([0.10, 0.13, -0.05]))
    assert out["paired_p"] == pytest.approx(stats.ttest_rel([0.80, 0.85, 0.90], [0.70, 0.72, 0.95]).pvalue)
    # The 95% interval of the mean difference by its textbook formula: mean ± t(0.975, n - 1) sd / sqrt(n).
    half = stats.t.ppf(0.975, 2) * np.std([0.10, 0.13, -0.05], ddof=1) / np.sqrt(3)
    assert (out["paired_ci_low"], out["paired_ci_high"]) == pytest.approx((out["paired_diff"] - half, out["paired_diff"] + half))
    at_epoch = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", epoch=0)
    assert at_epoch["mean_a"] == pytest.approx(np.mean([0.80, 0.85, 0.90]) / 3)  # the curves' first epoch
    with pytest.raises(ValueError, match="no runs of mnist_ot with settings"):
        experiments.compare(f"{tmp_path}:mnist_ot:epsilon=1", f"{tmp_path}:mnist_ot")
    # A claimed difference: against 0 it is the paired test above (ttest_rel against ttest_1samp of the differences);
    # against the observed mean it cannot be rejected.
    assert experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", against=0.0)["against_p"] \
        == pytest.approx(out["paired_p"])
    assert experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans",
                               against=out["paired_diff"])["against_p"] == pytest.approx(1.0)


def test_the_power_of_the_paired_test_matches_its_limits_and_a_simulation():
    """paired_power: the test's level when there is no difference; the normal approximation
    Phi(d sqrt(n) / sd - z) + Phi(-d sqrt(n) / sd - z) with many pairs; and, with few pairs, the rejection rate of
    scipy's ttest_1samp on simulated normal differences (20,000 draws, ± 0.01)."""
    assert experiments.paired_power(0.0, 0.04, 10) == pytest.approx(0.05)
    z, nc = stats.norm.ppf(0.975), 0.01 * np.sqrt(400) / 0.05
    assert experiments.paired_power(0.01, 0.05, 400) == pytest.approx(stats.norm.cdf(nc - z) + stats.norm.cdf(-nc - z),
                                                                      abs=2e-3)
    rng = np.random.default_rng(0)
    draws = rng.normal(0.041, 0.038, size=(20_000, 10))
    rate = np.mean(stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05)
    assert experiments.paired_power(0.041, 0.038, 10) == pytest.approx(rate, abs=0.01)


def test_a_resumed_runs_seconds_count_every_attempt_up_to_its_last_checkpoint(tmp_path):
    """Attempt 1 runs from t=100 and is killed after its last checkpoint at t=400; attempt 2 resumes at
    t=1000 and ends at t=1500: 300 + 500 seconds, not the last attempt's 500."""
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    assert experiments._attempts_seconds(tmp_path, 100.0, done=False) == 0
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"")
    os.utime(ckpt, (400.0, 400.0))
    assert experiments._attempts_seconds(tmp_path, 1000.0, done=False) == 300
    assert experiments._attempts_seconds(tmp_path, 1500.0, done=True) == 800
    # A run done in one attempt counts that attempt alone.
    other = tmp_path / "other"
    other.mkdir()
    experiments._attempts_seconds(other, 10.0, done=False)
    assert experiments._attempts_seconds(other, 60.0, done=True) == 50


def test_figure2_points_put_runs_without_the_grid_key_at_the_configs_value(tmp_path):
    """Figure 2 from a protocol folder: the epsilon-grid runs at their epsilon, the protocol's runs (no grid) at
    ``grid_default``; the PNGs are written, and Figure 1 draws only the runs without the grid key."""
    write_runs(tmp_path, {"ot": [0.8, 0.9]})
    for seed, acc in enumerate([0.3, 0.5]):
        record = json.loads((tmp_path / f"mnist_ot__seed={seed}.json").read_text())
        record.update(name=f"mnist_ot__epsilon=1__seed={seed}", grid={"model.epsilon": "1"}, final={"val/acc": acc})
        (tmp_path / f"{record['name']}.json").write_text(json.dumps(record))
    records = experiments.load(str(tmp_path))
    points = experiments._grid_points(records, "mnist", "val/acc", "model.epsilon", 0.01)
    assert {k: sorted(v) for k, v in points["ot"].items()} == {0.01: pytest.approx([0.8, 0.9]), 1.0: [0.3, 0.5]}
    assert dict(experiments._grid_points(records, "mnist", "val/acc", "model.epsilon", None)["ot"]) == {1.0: [0.3, 0.5]}
    # Seeds and methods the sweep has not run stay off the figure: every point of a curve averages the same seeds.
    write_runs(tmp_path, {"ot": [0.8, 0.9, 0.1], "ae_kmeans": [0.7]})
    points = experiments._grid_points(experiments.load(str(tmp_path)), "mnist", "val/acc", "model.epsilon", 0.01)
    assert set(points) == {"ot"} and {k: sorted(v) for k, v in points["ot"].items()} == {
        0.01: pytest.approx([0.8, 0.9]), 1.0: [0.3, 0.5]}
    written = experiments.figures(str(tmp_path), grid_key="model.epsilon", grid_default=0.01)
    assert [Path(p).name for p in written] == ["figure1_mnist.png", "figure2_mnist.png"]
    assert not (tmp_path / "figure2_mnist.md").exists()  # a notebook's call writes no table
    experiments.main(["figures", "--out", str(tmp_path), "--grid_key", "model.epsilon", "--grid_default", "0.01"])
    # The figure's numbers as tables: numpy's population std, as the error bars; seed 2 has no grid run, so no row.
    table = (tmp_path / "figure2_mnist.md").read_text().splitlines()
    assert "| ot | 0.850 ± 0.050 (2) | 0.400 ± 0.100 (2) |" in table
    assert [line for line in table if line.startswith("| ot | ")][1:] == ["| ot | 0 | 0.800 | 0.300 |",
                                                                          "| ot | 1 | 0.900 | 0.500 |"]


def test_the_proxy_check_leaves_out_grid_runs(tmp_path):
    """results/proxy_check.py compares runs of the configs' own settings: Figure 2's runs at other epsilons, in the
    same folder, must not enter its table, its Spearman correlation or its method means (they did once)."""
    import subprocess
    import sys

    write_runs(tmp_path, {"ot": [0.8, 0.7, 0.9], "soft_kmeans": [0.75, 0.8, 0.7]})
    for seed in range(3):
        record = json.loads((tmp_path / f"mnist_ot__seed={seed}.json").read_text())
        record.update(name=f"mnist_ot__epsilon=1__seed={seed}", grid={"model.epsilon": "1"})
        (tmp_path / f"{record['name']}.json").write_text(json.dumps(record))
    out = subprocess.run([sys.executable, str(REPO / "results" / "proxy_check.py"), "--records", str(tmp_path),
                          "--at", "1", "--proxy", ""], capture_output=True, text=True, check=True).stdout
    assert out.count("| mnist_ot | ") == 3 + 1  # a row per seed, and the method's means
    assert "over the 6 runs" in out


def test_a_records_commit_is_dirty_for_code_changes_not_for_results(tmp_path, monkeypatch):
    """A sweep rewrites its results tables as runs land; only a change to the code or the configs is '+dirty'."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    for path in ("lit_otclust/ot.py", "configs/a.yaml", "results/table.md"):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text("v1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "HEAD").strip()
    monkeypatch.setattr(experiments, "REPO", tmp_path)
    (tmp_path / "results/table.md").write_text("v2\n")
    assert experiments._commit() == head
    (tmp_path / "configs/a.yaml").write_text("v2\n")
    assert experiments._commit() == head + "+dirty"
