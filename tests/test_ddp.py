"""Real multi-process DDP on CPU (gloo): a fit with 2 ranks, checked against a 1-process validation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from lit_otclust.cli import main
from test_cli import REPO, SMOKE, epoch_metrics


@pytest.mark.distributed
def test_ddp_fit_evaluates_every_sample_once(data_dir, tmp_path, monkeypatch):
    # 1001 samples: not divisible by the 2 ranks, so a padding sampler would count one twice.
    common = ["--config", SMOKE, "--data.data_dir", str(data_dir), "--data.init_args.subset", "1001",
              "--trainer.default_root_dir", str(tmp_path)]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "lit_otclust", "fit", *common, "--trainer.strategy", "ddp",
           "--trainer.devices", "2", "--trainer.accelerator", "cpu"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = epoch_metrics(tmp_path)[2]
    # The fitted model, validated again by one process over all 1001 samples, scores exactly
    # what the two ranks reported together.
    monkeypatch.setenv("WANDB_MODE", "disabled")
    single = main(["validate", *common, "--trainer.logger", "false",
                   "--ckpt_path", str(tmp_path / "checkpoints" / "last.ckpt")]).trainer.callback_metrics
    for key in ("val/acc", "val/nmi", "val/ari", "heldout/acc"):
        assert float(single[key]) == pytest.approx(logged[key], abs=1e-6), key
    # Both ranks trained the same replica: the checkpoint is rank 0's, and DDP kept ranks in sync,
    # so the Sinkhorn cluster potential (a buffer) is finite and the centers moved from k-means.
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert torch.isfinite(ckpt["state_dict"]["g_avg"]).all()
    assert bool(ckpt["state_dict"]["joint_phase"])


@pytest.mark.distributed
def test_ddp_refuses_an_evaluation_set_smaller_than_the_ranks_instead_of_hanging(data_dir, tmp_path):
    # One sample, two ranks: one rank would have no batch, skip the evaluation loop and leave the other
    # waiting in a collective forever. It must end with an error that says why.
    cmd = [sys.executable, "-m", "lit_otclust", "validate", "--config", SMOKE, "--data.data_dir", str(data_dir),
           "--data.init_args.subset", "1", "--data.init_args.batch_size", "1", "--trainer.default_root_dir",
           str(tmp_path), "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
           "--trainer.logger", "false"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "WANDB_MODE": "disabled"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0 and "cannot be shared by 2 ranks" in proc.stderr, proc.stderr[-3000:]
