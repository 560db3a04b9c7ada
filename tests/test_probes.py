"""The probes RESULTS.md cites: each statistic against a brute-force or closed-form reference."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest
import torch

from lit_otclust.models import MLPAutoencoder
from lit_otclust.lab.probes import best_of, encoder_from_checkpoint, forced_move, main, nearest_distance


def test_best_of_matches_enumerating_every_subset():
    rng = np.random.default_rng(0)
    accs, inertias = rng.random(9).tolist(), rng.random(9).tolist()
    for r in (1, 3, 9):
        subsets = list(itertools.combinations(range(9), r))
        brute = np.mean([accs[min(s, key=lambda i: inertias[i])] for s in subsets])
        assert best_of(accs, inertias, r) == pytest.approx(brute, abs=1e-12)


def test_forced_move_of_the_whole_set_is_its_imbalance():
    # A "batch" of every point, drawn without replacement, is the whole set: the move is (1/2) sum |size - 1/K|.
    clusters = np.repeat(np.arange(4), [10, 30, 20, 40])
    expected = 0.5 * np.abs(np.array([10, 30, 20, 40]) / 100 - 0.25).sum()
    assert forced_move(clusters, 4, batch=100, batches=3, seed=0) == pytest.approx(expected)
    assert forced_move(np.repeat(np.arange(4), 25), 4, batch=100, batches=3, seed=0) == 0.0
    # a small batch of a balanced set is not balanced: sampling noise alone forces a move
    assert forced_move(np.repeat(np.arange(4), 25), 4, batch=10, batches=50, seed=0) > 0.0


def test_nearest_distance_matches_numpy():
    z, centers = torch.randn(50, 3, dtype=torch.float64), torch.randn(4, 3)
    d = ((z.numpy()[:, None, :] - centers.double().numpy()[None]) ** 2).sum(-1).min(1).mean()
    assert nearest_distance(z, centers) == pytest.approx(d, rel=1e-6)


def test_encoder_from_checkpoint_embeds_as_the_saved_autoencoder(tmp_path):
    torch.manual_seed(0)
    ae = MLPAutoencoder((784,))
    state = {"state_dict": {f"autoencoder.{k}": v for k, v in ae.state_dict().items()} | {"centers": torch.zeros(10, 10)},
             "epoch": 3, "hyper_parameters": {"clustering": "ot"}}
    torch.save(state, tmp_path / "last.ckpt")
    encoder, loaded = encoder_from_checkpoint(str(tmp_path / "last.ckpt"))
    x = torch.rand(5, 784)
    assert torch.equal(encoder(x), ae.encoder(x)) and loaded["epoch"] == 3


def test_encoder_from_checkpoint_builds_the_autoencoder_its_hyperparameters_name(tmp_path):
    # DEC's d-500-500-2000-10, as LightningCLI saves the model's `autoencoder` argument
    torch.manual_seed(0)
    spec = {"class_path": "lit_otclust.models.MLPAutoencoder",
            "init_args": {"input_shape": (784,), "hidden_dims": [500, 500, 2000], "latent_dim": 10}}
    ae = MLPAutoencoder(**spec["init_args"])
    spec["init_args"]["weights"] = str(tmp_path / "gone.ckpt")  # a run started from a pre-training made elsewhere
    state = {"state_dict": {f"autoencoder.{k}": v for k, v in ae.state_dict().items()}, "epoch": 0,
             "hyper_parameters": {"autoencoder": spec, "loss": None}}
    torch.save(state, tmp_path / "last.ckpt")
    encoder, _ = encoder_from_checkpoint(str(tmp_path / "last.ckpt"))
    x = torch.rand(5, 784)
    assert torch.equal(encoder(x), ae.encoder(x))
    state["hyper_parameters"]["autoencoder"] = {"class_path": "lit_otclust.models.ConvAutoencoder", "init_args": {}}
    torch.save(state, tmp_path / "conv.ckpt")
    with pytest.raises(ValueError, match="ConvAutoencoder"):
        encoder_from_checkpoint(str(tmp_path / "conv.ckpt"))


def test_plan_noise_prints_the_imbalance_of_a_predictions_file(tmp_path, capsys):
    path = tmp_path / "predictions.csv"
    clusters = [0] * 1500 + [1] * 3500  # sizes 0.3 and 0.7 against 1/2: imbalance 0.2
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["index", "cluster"])
        writer.writerows(enumerate(clusters))
    main(["plan_noise", str(path), "--batch", "300", "--batches", "20"])
    out = capsys.readouterr().out
    assert "5000 images, K = 2, nearest-center cluster sizes [0.3, 0.7]" in out
    assert "whole-set imbalance (1/2) sum |size - 1/K| = 0.200" in out
    with pytest.raises(SystemExit):
        main(["plan_noise", str(path), "--batch", "6000"])
    err = capsys.readouterr().err
    assert "--batch 6000 is larger than" in err and "5000 rows" in err


@pytest.mark.slow
def test_proportions_probe_rebuilds_the_fitted_set_and_the_class_start_holds_its_shares(tmp_path, data_dir):
    """On a checkpoint of 3 digits at 60 / 30 / 10 %, the probe rebuilds those images from the checkpoint's data
    settings, and size-constrained k-means started from the class means keeps each class's share on its own cluster
    (size error, by the metrics' Hungarian matching), at an accuracy at or above k-means'."""
    import json

    torch.manual_seed(0)
    ae = MLPAutoencoder((784,))
    w = [0.6, 0.3, 0.1]
    state = {"state_dict": {f"autoencoder.{k}": v for k, v in ae.state_dict().items()}, "epoch": 0,
             "hyper_parameters": {"loss": None},
             "datamodule_hyper_parameters": {"_class_path": "lit_otclust.data.MNISTDataModule", "fit_split": "test",
                                             "classes": [0, 1, 2], "class_proportions": w, "seed": 0}}
    torch.save(state, tmp_path / "last.ckpt")
    main(["proportions", "--data_dir", str(data_dir), "--out", str(tmp_path / "out"), "--n_init", "2",
          str(tmp_path / "last.ckpt")])
    rows = {r["partition"]: r for r in json.loads((tmp_path / "out" / "proportions.json").read_text())}
    assert list(rows) == ["k-means", "k-means centers, w by size", "size-constrained k-means",
                          "size-constrained k-means from the class means"]
    start = rows["size-constrained k-means from the class means"]
    assert start["size_error"] <= 0.01 and start["acc"] >= rows["k-means"]["acc"], rows
    md = (tmp_path / "out" / "proportions.md").read_text()
    assert "| last.ckpt" not in md and f"| {tmp_path.parent.name} | 0 | 0 | k-means |" in md  # run folder, seed, epoch
