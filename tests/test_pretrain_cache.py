"""``--pretrain_cache``: a fit that starts from another configuration's pre-training ends where it would have ended
pre-training itself, its logs hold the pre-training's rows, and the key tells apart what pre-training reads."""

from __future__ import annotations

import json

import torch
import wandb

from _runs import SMOKE, epoch_metrics
from lit_otclust.cli import main
from lit_otclust.pretrain_cache import CHECKPOINT, STARTED_FROM, pretraining_key
from lit_otclust.runfiles import read_curves
from lit_otclust.wandb_run import history_rows, read_run_file

SOFT_KMEANS = ["--model.loss", "lit_otclust.losses.SoftKMeans", "--model.loss.init_args.epsilon", "0.01"]
W = [0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2]


def fit(data_dir, root, *extra):
    cli = main(["fit", "--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(root),
                *extra])
    wandb.finish()  # in one process, the next WandbLogger would otherwise reuse this run
    return cli.trainer


def _config(**changes) -> dict:
    config = {"seed_everything": 0, "ckpt_path": None, "pretrain_cache": "cache",
              "trainer": {"max_epochs": 250, "default_root_dir": "runs/a", "precision": "32-true"},
              "data": {"class_path": "lit_otclust.data.MNISTDataModule", "init_args": {"batch_size": 300}},
              "model": {"autoencoder": {"class_path": "lit_otclust.models.MLPAutoencoder"}, "lr": 0.001,
                        "loss": {"class_path": "lit_otclust.losses.OTLoss"}, "proportions": None,
                        "clustering_weight": 0.1},
              "phases": {"pretrain_epochs": 50, "kmeans_at": "switch", "center_init": "kmeans", "refit_epochs": None},
              "wandb": {"group": "g"}}
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = config
        for part in parents:
            node = node[part]
        node[last] = value
    return config


def test_the_key_ignores_what_acts_after_the_switch_and_reads_the_rest():
    base = pretraining_key(_config())
    after_switch = [{"model__loss": {"class_path": "lit_otclust.losses.SoftKMeans"}}, {"model__proportions": [0.5, 0.5]},
                    {"model__clustering_weight": 1.0}, {"phases__refit_epochs": [199]}, {"phases__warmup_steps": 200},
                    {"trainer__max_epochs": 200},
                    {"phases__center_init": "constrained"}, {"trainer__default_root_dir": "runs/b"},
                    {"wandb__group": "h"}, {"ckpt_path": "last"}]
    for change in after_switch:
        assert pretraining_key(_config(**change)) == base, change
    pretraining = [{"seed_everything": 1}, {"model__lr": 0.01}, {"phases__pretrain_epochs": 40},
                   {"data__init_args__batch_size": 256}, {"trainer__precision": "64-true"},
                   {"model__autoencoder": {"class_path": "lit_otclust.models.DECAutoencoder"}},
                   # centers drawn before pre-training: evaluation while pre-training scores them
                   {"phases__kmeans_at": "start"}]
    for change in pretraining:
        assert pretraining_key(_config(**change)) != base, change
    assert pretraining_key(_config(phases__kmeans_at="start", phases__center_init="uniform")) != pretraining_key(
        _config(phases__kmeans_at="start"))


def test_a_fit_from_another_losss_pretraining_equals_the_fit_that_pretrains_itself(data_dir, tmp_path):
    """Soft k-means writes the pre-training; OT told a non-uniform w starts from it and ends bit for bit where OT
    that pre-trains itself ends, with its own proportions, the pre-training's rows in its CSV log and W&B run."""
    cache = tmp_path / "cache"
    fit(data_dir, tmp_path / "soft_kmeans", *SOFT_KMEANS, "--pretrain_cache", str(cache))
    (entry,) = [p.parent for p in cache.glob(f"*/{CHECKPOINT}")]
    assert not any(k.startswith("loss.") or k == "proportions"
                   for k in torch.load(entry / CHECKPOINT, weights_only=False)["state_dict"])

    ot = ["--model.proportions", json.dumps(W)]
    shared = fit(data_dir, tmp_path / "shared", *ot, "--pretrain_cache", str(cache), "--ckpt_path", "last")
    alone = fit(data_dir, tmp_path / "alone", *ot)
    started = json.loads((tmp_path / "shared" / STARTED_FROM).read_text())
    assert started["checkpoint"] == str(entry / CHECKPOINT) and started["source"] == str(tmp_path / "soft_kmeans")
    assert shared.current_epoch == alone.current_epoch == 3
    a, b = shared.lightning_module.state_dict(), alone.lightning_module.state_dict()
    assert torch.allclose(a["proportions"], torch.tensor(W))
    for name, value in b.items():
        torch.testing.assert_close(a[name], value, rtol=0, atol=0, msg=name)
    # The pre-training's row (epoch 0) is in the shared run's CSV log, as the lone run logged it.
    assert sorted(epoch_metrics(tmp_path / "shared")) == [1, 2], "the shared run trained its pre-training epoch"
    merged = {}
    for log in sorted((tmp_path / "shared" / "csv").glob("version_*/metrics.csv")):
        merged.update(read_curves(log, keys=None))
    lone = epoch_metrics(tmp_path / "alone")
    assert sorted(merged) == sorted(lone) == [0, 1, 2]
    for epoch in (0, 2):
        for key in ("val/acc", "train/recon"):
            assert merged[epoch][key] == lone[epoch][key], (epoch, key)
    # ... and in its W&B run, which also holds the joint epochs.
    (run_file,) = (tmp_path / "shared" / "wandb").glob("offline-run-*/run-*.wandb")
    epochs = {row["epoch"] for row in history_rows(read_run_file(run_file)) if "val/acc" in row}
    assert epochs == {0, 1, 2}
    # A fit whose pre-training is there but has a checkpoint of its own resumes its own.
    again = fit(data_dir, tmp_path / "shared", *ot, "--pretrain_cache", str(cache), "--ckpt_path", "last",
                "--trainer.max_epochs", "4")
    assert again.current_epoch == 4
