"""Real multi-process DDP on CPU (gloo): a fit with 2 ranks, checked against a 1-process validation."""

from __future__ import annotations

import os
import subprocess
import sys

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from lit_otclust.cli import OTClusterCLI, main
from lit_otclust.data import passthrough
from lit_otclust.system import DeepClustering
from _runs import REPO, SMOKE, epoch_metrics


@pytest.mark.distributed
@pytest.mark.parametrize("data", [["--data.init_args.subset", "1001"],
                                  ["--data.init_args.fit_split", "test", "--data.init_args.subset", "null",
                                   "--trainer.limit_train_batches", "5"]], ids=["subset-1001", "heldout-in-fit"])
def test_ddp_fit_evaluates_every_sample_once(data_dir, tmp_path, monkeypatch, data):
    """subset-1001: not divisible by the 2 ranks, so a padding sampler would count one sample twice.
    heldout-in-fit: the held-out split is the fitted set (fit_split test), scored on each rank's shard of it."""
    common = ["--config", SMOKE, "--data.data_dir", str(data_dir), *data, "--trainer.default_root_dir", str(tmp_path)]
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
    for key in ("val/acc", "val/nmi", "val/ari", "heldout/acc", "heldout/size_min", "heldout/size_max"):
        assert float(single[key]) == pytest.approx(logged[key], abs=1e-6), key
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert bool(ckpt["state_dict"]["joint_phase"])


@pytest.mark.distributed
def test_two_ranks_train_what_one_process_trains_on_the_global_batch(data_dir, tmp_path):
    """Each DDP step equals one process's step on the union of the ranks' batches: one Sinkhorn solve over
    all 200 points (rows weighted 1/200), gradients averaged. Compared after 3 joint steps, in float64
    (``trainer.precision=64-true``): Adam's first updates (lr * sign of each gradient coordinate) blow the two
    paths' rounding differences up, in float32 to ~1e-5 on a few of the 125,000 weights, more or less by CPU;
    in float64 the paths agree to ~1e-14."""
    common = ["--config", SMOKE, "--data.data_dir", str(data_dir), "--data.init_args.subset", "1001",
              "--phases.pretrain_epochs", "0", "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3",
              "--trainer.limit_val_batches", "0", "--trainer.logger", "false", "--trainer.precision", "64-true"]
    cmd = [sys.executable, "-m", "lit_otclust", "fit", *common, "--trainer.default_root_dir", str(tmp_path / "ddp"),
           "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "WANDB_MODE": "disabled"}, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp_state = torch.load(tmp_path / "ddp" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    ref = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=[*common, "--trainer.default_root_dir", str(tmp_path / "one")])
    ref.datamodule.train_dataloader = lambda: DataLoader(
        ref.datamodule.fit_set, batch_sampler=GlobalBatches(ref.datamodule.fit_set, ranks=2, batch_size=100),
        collate_fn=passthrough)
    ref.trainer.fit(ref.model, datamodule=ref.datamodule)
    assert ref.trainer.global_step == 3 and bool(ddp_state["joint_phase"]) and ddp_state["centers"].dtype == torch.float64
    for name, value in ref.model.state_dict().items():
        torch.testing.assert_close(ddp_state[name], value, rtol=1e-9, atol=1e-11,
                                   msg=lambda m, name=name: f"{name}: {m}")
    # The Sinkhorn potential is the global problem's: a wrong 1/n (per rank instead of global) moves it by eps*log 2.
    torch.testing.assert_close(ddp_state["loss.g_last"], ref.model.loss.g_last, rtol=0, atol=1e-9)


class GlobalBatches:
    """The global batch of each DDP step: rank 0's batch, then rank 1's, ..., from the sampler Lightning
    injects under DDP (torch's DistributedSampler, seeded by seed_everything, padded to a multiple of the ranks)."""

    def __init__(self, dataset, ranks: int, batch_size: int, seed: int = 0) -> None:
        self.samplers = [DistributedSampler(dataset, num_replicas=ranks, rank=r, shuffle=True, seed=seed)
                         for r in range(ranks)]
        self.batch_size = batch_size

    def set_epoch(self, epoch: int) -> None:
        for sampler in self.samplers:
            sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.samplers[0]) // self.batch_size  # drop_last, as the training loader

    def __iter__(self):
        shards = [list(sampler) for sampler in self.samplers]
        for b in range(len(self)):
            yield [i for shard in shards for i in shard[b * self.batch_size:(b + 1) * self.batch_size]]


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


@pytest.mark.distributed
def test_two_ranks_start_from_a_shared_pretraining_together(data_dir, tmp_path):
    """``--pretrain_cache`` under DDP: every rank restores the cached pre-training (one that did not would train
    apart from rank 0, or hang), and the run ends where the run that wrote it ends."""
    common = ["--config", SMOKE, "--data.data_dir", str(data_dir), "--data.init_args.subset", "1001",
              "--trainer.limit_train_batches", "3", "--trainer.strategy", "ddp", "--trainer.devices", "2",
              "--trainer.accelerator", "cpu", "--pretrain_cache", str(tmp_path / "cache")]
    for root in ("writes", "reads"):
        cmd = [sys.executable, "-m", "lit_otclust", "fit", *common, "--trainer.default_root_dir", str(tmp_path / root)]
        proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "WANDB_MODE": "disabled"}, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "reads" / "pretrained.json").is_file() and not (tmp_path / "writes" / "pretrained.json").exists()
    a, b = (torch.load(tmp_path / root / "checkpoints" / "last.ckpt", weights_only=False) for root in ("writes", "reads"))
    assert a["epoch"] == b["epoch"] == 2
    for name, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][name], value, rtol=0, atol=0, msg=name)
