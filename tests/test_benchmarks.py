"""The maintained tools of benchmarks/ run, as subprocesses on tiny settings: a broken benchmark is caught here, not on
a short GPU lease. Nothing here imports from benchmarks/."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT


def _run(cmd: list[str], timeout: int = 1200) -> str:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert proc.returncode == 0, (f"{' '.join(cmd)} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                                  f"{proc.stderr[-3000:]}")
    return proc.stdout


def test_gpu_check_dry_run_prints_the_gpu_commands():
    out = _run(["bash", "benchmarks/gpu_check.sh", "--dry-run", "--data-dir", "/data"])
    stages = [line for line in out.splitlines() if line.startswith("== ")]
    assert [line.split(":")[0] for line in stages] == ["== tests", "== step_default", "== step_reduce_overhead",
                                                       "== fit", "== concurrent"]
    fit, concurrent = stages[3], stages[4]
    for line in (fit, concurrent):
        assert "--epochs 5 20" in line and "--data.init_args.on_device true" in line
        assert "--trainer.accelerator gpu --trainer.devices 1" in line and "--model.loss.init_args.solver fixed" in line
    for mode in ("false", "default", "reduce-overhead"):
        assert f"--model.compile\\ {mode}" in fit
    assert "--concurrent 1 2 4 8" in concurrent
    assert "--bare fixed --bare-device cuda" in fit  # the fit against the bare loop on the same GPU
    assert "tests/test_cuda.py" in stages[0]


def test_gpu_check_refuses_an_unknown_argument():
    proc = subprocess.run(["bash", "benchmarks/gpu_check.sh", "--dry-run", "--epochs"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "unknown argument: --epochs" in proc.stdout


@pytest.mark.slow
def test_gpu_check_runs_every_stage_on_the_cpu(data_dir):
    out = _run(["bash", "benchmarks/gpu_check.sh", "--cpu", "--data-dir", str(data_dir)])
    assert "gpu_check: all stages ran" in out and "FAILED" not in out
    assert "200 ep min" in out  # the fit stage's table: marginal epoch, fixed cost, projection
    for variant in ("compile=false", "compile=default"):
        assert f"  {variant} |" in out or f" {variant} |" in out
    assert "200-ep runs/h" in out and "\n  N=2:" in out  # the concurrent stage


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["benchmarks.bench_fit", "--epochs", "1", "2", "--rounds", "1", "--variant", "fixed",
     "--model.loss.init_args.solver fixed --model.loss.init_args.iters 3", "--bare", "fixed", "--data.init_args.subset", "600"],
    ["benchmarks.bench_fit", "--config", "configs/mnist_ae_kmeans.yaml", "--epochs", "1", "2", "--rounds", "1",
     "--data.init_args.subset", "600"],
    ["benchmarks.bench_sinkhorn", "--rounds", "1", "--sizes", "300", "10", "--eps", "0.1"],
    ["benchmarks.bench_data", "--datasets", "mnist", "--rounds", "1"],
    ["benchmarks.bench_data", "--datasets", "mnist", "--rounds", "1", "--eval-sizes", "5000"],
    ["benchmarks.bench_compile", "--variants", "eager", "loss", "--steps", "1", "--rounds", "1"],
    ["benchmarks.bench_estimator", "--n", "300", "--rounds", "1"],
], ids=lambda args: args[0])
def test_each_benchmark_runs_on_tiny_settings(args, data_dir):
    no_data = ("benchmarks.bench_sinkhorn", "benchmarks.bench_compile", "benchmarks.bench_estimator")
    extra = [] if args[0] in no_data else ["--data-dir", str(data_dir)]
    out = _run([sys.executable, "-m", *args, *extra])
    expected = {"benchmarks.bench_fit": "| bare-fixed |" if "--bare" in args else " solve |",
                "benchmarks.bench_sinkhorn": "(300, 10)",
                "benchmarks.bench_data": "eval_batch_size   5000" if "--eval-sizes" in args else "train epoch",
                "benchmarks.bench_compile": "cpu / eager", "benchmarks.bench_estimator": "| estimator |"}[args[0]]
    assert expected in out
    if "--config" in args:  # the config timed, not configs/mnist_ot.yaml
        assert f"{args[args.index('--config') + 1]}, epochs 1 and 2" in out
