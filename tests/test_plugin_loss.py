"""A clustering loss written outside the package trains through the command line (README, "Writing a loss")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import Tensor

from lit_otclust.losses import ClusteringLoss, soft_kmeans_loss
from lit_otclust.sinkhorn import squared_distances

REPO = Path(__file__).resolve().parents[1]


class RelativeSoftKMeans(ClusteringLoss):
    """Soft k-means whose temperature follows the embedding's scale: epsilon = ``fraction`` times the batch's mean
    squared distance to the nearest center, so shrinking the embedding cannot make every assignment soft."""

    tag = "relative_soft_kmeans"

    def __init__(self, fraction: float = 0.1) -> None:
        super().__init__()
        if not fraction > 0:
            raise ValueError(f"fraction must be > 0, got {fraction!r}")
        self.fraction = fraction

    def forward(self, z: Tensor, centers: Tensor, proportions: Tensor) -> tuple[Tensor, dict[str, float]]:
        nearest = squared_distances(z.detach(), centers.detach()).min(1).values.mean()  # (m, K) -> ()
        epsilon = self.fraction * max(float(nearest), 1e-12)  # a point on a center: keep epsilon > 0
        return soft_kmeans_loss(z, centers, epsilon=epsilon), {"epsilon": epsilon}


def test_a_few_sgd_steps_pull_the_centers_onto_the_points():
    """Its value moves with its temperature, so the property checked is k-means': the mean squared distance to the
    nearest center goes down, here by more than half."""
    gen = torch.Generator().manual_seed(0)
    z = torch.cat([torch.randn(30, 2, generator=gen) + shift for shift in (torch.tensor([4.0, 0]), torch.zeros(2))])
    centers = torch.randn(2, 2, generator=gen).requires_grad_(True)
    loss_fn = RelativeSoftKMeans(0.5)
    opt = torch.optim.SGD([centers], lr=0.05)
    spread = lambda: squared_distances(z, centers.detach()).min(1).values.mean().item()  # noqa: E731
    before = spread()
    for _ in range(50):
        loss, _ = loss_fn(z, centers, torch.full((2,), 0.5))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert spread() < 0.5 * before


@pytest.mark.slow  # a subprocess fit
def test_a_loss_from_outside_the_package_trains_through_fit(data_dir, tmp_path):
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "lit_otclust", "fit", "--config", "configs/smoke.yaml", "--data.data_dir",
           str(data_dir), "--model.loss.class_path", "test_plugin_loss.RelativeSoftKMeans",
           "--model.loss.init_args.fraction", "0.2", "--trainer.max_epochs", "2", "--trainer.default_root_dir",
           str(tmp_path), "--trainer.enable_progress_bar", "false"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["hyper_parameters"]["loss"]["class_path"] == "test_plugin_loss.RelativeSoftKMeans"
    assert bool(ckpt["state_dict"]["joint_phase"])  # the smoke config pre-trains 1 epoch: the loss trained in the 2nd
    header, *rows = (REPO / tmp_path / "csv" / "version_0" / "metrics.csv").read_text().splitlines()
    epsilons = [row.split(",")[header.split(",").index("train/epsilon")] for row in rows]
    assert any(value and float(value) > 0 for value in epsilons)  # its own statistic, logged as train/<name>
