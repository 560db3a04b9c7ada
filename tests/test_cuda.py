"""Issue #10's GPU checks. Skipped where no CUDA GPU is (this project's build machines); where one is,
``bash benchmarks/gpu_check.sh`` runs them with the timings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lit_otclust.cli import main
from lit_otclust.losses import ot_clustering_loss
from lit_otclust.sinkhorn import sinkhorn, squared_distances
from _runs import SMOKE
from _problems import _problem

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU; `bash benchmarks/gpu_check.sh` runs these where one is")


def test_sinkhorn_and_its_gradient_on_the_gpu_equal_the_cpus():
    z, centers, _, b = _problem(300, 10, 21, p=10)
    cpu = sinkhorn(squared_distances(z, centers), b=b, epsilon=0.01, tol=1e-9)
    gpu = sinkhorn(squared_distances(z.cuda(), centers.cuda()), b=b.cuda(), epsilon=0.01, tol=1e-9)
    assert gpu.plan.device.type == gpu.g.device.type == "cuda" and gpu.converged
    assert (gpu.plan.cpu() - cpu.plan).abs().sum().item() < 1e-7
    # The training loss in float32, as a run computes it: the same value and gradient as on the CPU.
    grads = {}
    for device in ("cpu", "cuda"):
        zd = z.float().to(device).requires_grad_()
        loss, _ = ot_clustering_loss(zd, centers.float().to(device), b.float().to(device), epsilon=0.01)
        loss.backward()
        grads[device] = (loss.item(), zd.grad.cpu())
    assert np.isclose(grads["cuda"][0], grads["cpu"][0], rtol=1e-4)
    torch.testing.assert_close(grads["cuda"][1], grads["cpu"][1], rtol=1e-3, atol=1e-6)


def _nccl_worker(rank: int, world_size: int, cost, b, z, centers):
    device = torch.device("cuda", rank)
    rows = torch.tensor_split(torch.arange(cost.shape[0]), world_size)[rank]
    res = sinkhorn(cost[rows].to(device), b=b.to(device), epsilon=0.01, distributed=True)
    loss, _ = ot_clustering_loss(z[rows].to(device), centers.to(device), b.to(device), epsilon=0.01, distributed=True)
    return res.plan.cpu(), loss.item()


@pytest.mark.distributed
def test_the_distributed_sinkhorn_runs_under_nccl():
    """NCCL, DDP's backend on GPUs, takes GPU tensors only: a CPU tensor in any collective raises (gloo on the CPU
    hides that). One rank a GPU, on up to two GPUs; with one GPU the collectives still go through NCCL."""
    from _dist import run_in_processes

    z, centers, _, b = _problem(90, 4, 16)
    cost = squared_distances(z, centers)
    single = sinkhorn(cost, b=b, epsilon=0.01)
    single_loss, _ = ot_clustering_loss(z, centers, b, epsilon=0.01)
    out = run_in_processes(_nccl_worker, min(torch.cuda.device_count(), 2), cost, b, z, centers, backend="nccl")
    assert (torch.cat([plan for plan, _ in out]) - single.plan).abs().max().item() < 1e-10
    assert np.isclose(sum(loss for _, loss in out), single_loss.item(), rtol=1e-10)


def test_a_fit_on_one_gpu_with_the_data_on_the_device_trains_draws_and_predicts(data_dir, tmp_path):
    args = ["--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(tmp_path),
            "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--data.init_args.on_device", "true"]
    # Pictures at epoch 1 (from device tensors) and at the end of fit, after Lightning's teardown has moved the
    # module back to the CPU while the last evaluation's embeddings stay on the GPU.
    cli = main(["fit", *args, "--trainer.max_epochs", "3", "--figures.every_n_epochs", "2"])
    # Lightning's teardown moves the module back to the CPU after fit; the strategy keeps the device it trained on.
    assert cli.trainer.strategy.root_device.type == "cuda" and cli.datamodule.fit_set.x.device.type == "cuda"
    assert float(cli.trainer.callback_metrics["val/acc"]) > 0.2
    assert (tmp_path / "figures" / "plan_epoch001.png").stat().st_size > 1000  # drawn from device tensors
    assert (tmp_path / "figures" / "plan_final.png").stat().st_size > 1000
    main(["predict", *args, "--ckpt_path", str(tmp_path / "checkpoints" / "last.ckpt")])
    assert len((tmp_path / "predictions.csv").read_text().splitlines()) == 1 + len(cli.datamodule.fit_set)

