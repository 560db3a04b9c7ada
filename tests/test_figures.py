"""Pictures of the clusters (lit_otclust.plots, drawn by lit_otclust.figures) and the W&B run the CLI sets up."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import lightning as L
import matplotlib.image
import numpy as np
import pytest
import torch
import wandb
from sklearn.decomposition import PCA
from sklearn.metrics import confusion_matrix
from torch import nn

from lit_otclust.cli import OTClusterCLI, main
from lit_otclust.data import InMemoryDataset, passthrough
from lit_otclust.figures import FIGURE_NAMES, ClusterFigures
from lit_otclust.losses import OTLoss, SoftKMeans
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.models import ConvAutoencoder
from lit_otclust.plots import (confusion_figure, display_images, embedding_figure, gallery_figure, matched_confusion,
                               nearest_to_centers, pca_2d, plan_figure, sizes_figure)
from lit_otclust.runfiles import read_confusion_csv, read_curves
from lit_otclust.system import DeepClustering
from lit_otclust.wandb_run import run_tags
from _runs import SMOKE


def wandb_records(run_dir: Path) -> list:
    """The records of an offline run's transaction log (``run-*.wandb``), decoded.

    The file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks of chunks, each with a
    7-byte header (crc32c, length, type: 1 full, 2 first, 3 middle, 4 last); a record is one
    full chunk or first + middles + last, and holds a ``wandb_internal_pb2.Record``.
    """
    from wandb.proto import wandb_internal_pb2

    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, parts, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            parts = chunk
        elif kind in (3, 4):
            parts += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
    return records


@pytest.mark.slow
def test_fit_draws_every_figure_to_disk_and_to_an_offline_wandb_run_set_up_by_epoch(data_dir, tmp_path):
    cli = main(["fit", "--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(tmp_path),
                "--trainer.max_epochs", "2", "--figures.every_n_epochs", "1"])
    wandb.finish()
    assert sum(isinstance(cb, ClusterFigures) for cb in cli.trainer.callbacks) == 1
    figures = tmp_path / "figures"
    # Epoch 0 pre-trains (no Sinkhorn, no plan); epoch 1 is joint OT.
    expected = {f"{name}_{tag}.png" for name in FIGURE_NAMES for tag in ("epoch000", "epoch001", "final")}
    expected -= {"plan_epoch000.png"}
    expected |= {f"confusion_{tag}.csv" for tag in ("epoch000", "epoch001", "final")}  # the counts behind it
    assert {p.name for p in figures.iterdir()} == expected
    # The CSV is sklearn's confusion matrix of the final assignments, rows in the picture's order (matched
    # clusters first), so its diagonal is the Hungarian accuracy the run logged.
    model, fit_set = cli.trainer.lightning_module, cli.datamodule.fit_set
    table = read_confusion_csv(figures / "confusion_final.csv")
    pred, y = model.assign(model.embed(fit_set.x)).numpy(), fit_set.y.numpy()
    reference = confusion_matrix(pred, y, labels=range(10))[:, :10]  # (cluster, class)
    np.testing.assert_array_equal(np.array(table["counts"]), reference[table["cluster"]])
    assert sorted(table["cluster"]) == list(range(10))
    assert [table["matched_class"][i] for i in range(10)] == list(range(10))  # matched to class i on row i
    acc = np.trace(np.array(table["counts"])) / len(y)
    assert acc == pytest.approx(float(cli.trainer.callback_metrics["val/acc"]), abs=1e-6)
    for path in figures.glob("*.png"):
        pixels = matplotlib.image.imread(path)  # (H, W, 4) floats: a PNG that decodes
        assert pixels.ndim == 3 and min(pixels.shape[:2]) >= 300, (path.name, pixels.shape)
        assert pixels[..., :3].std() > 0.05, f"{path.name} is blank"
    # Nothing trained between the last validation and the end of fit: the final pictures are those of epoch 1.
    for name in FIGURE_NAMES:
        assert (figures / f"{name}_final.png").read_bytes() == (figures / f"{name}_epoch001.png").read_bytes()
    # The pictures reuse the last evaluation's embeddings (nothing trained since): equal to embedding the samples
    # afresh, in the data set's order; a stale step or a partial set (a DDP shard) embeds afresh instead.
    drawer = next(cb for cb in cli.trainer.callbacks if isinstance(cb, ClusterFigures))
    fresh = model.embed(fit_set.x)
    step, index, z = model.eval_embeddings["val"]
    assert step == cli.trainer.global_step and len(index) == len(fit_set)
    real_embed, model.embed = model.embed, None  # the cache must not call it
    torch.testing.assert_close(drawer._embed(model, fit_set.x, "val"), fresh)
    model.embed = real_embed
    for stale in ((step - 1, index, z), (step, index[:500], z[:500])):
        model.eval_embeddings["val"] = stale
        torch.testing.assert_close(drawer._embed(model, fit_set.x, "val"), fresh)
    # One row of 8 images per cluster: at least 10 x 28 pixels high and 8 x 28 wide.
    gallery = matplotlib.image.imread(figures / "gallery_epoch001.png")
    assert gallery.shape[0] > 10 * 28 and gallery.shape[1] > 8 * 28

    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    media = [p.name for p in (run_dir / "files" / "media" / "images" / "figures").glob("*.png")]
    for name in FIGURE_NAMES:
        assert sum(m.startswith(f"{name}_") for m in media) == (1 if name == "plan" else 2), (name, media)

    records = wandb_records(run_dir)
    config = {}
    for r in records:
        if r.WhichOneof("record_type") == "config":
            config.update({u.key: json.loads(u.value_json) for u in r.config.update})
    assert config["model"]["loss"]["class_path"] == "lit_otclust.losses.OTLoss"
    assert config["model"]["autoencoder"]["class_path"].endswith("MLPAutoencoder")
    assert config["data"]["class_path"] == "lit_otclust.data.MNISTDataModule"
    assert config["data"]["init_args"]["subset"] == 1000
    assert config["trainer"]["max_epochs"] == 2 and config["phases"]["pretrain_epochs"] == 1
    assert config["figures"]["every_n_epochs"] == 1 and config["wandb"]["log_model"] is False
    tags = [list(r.run.tags) for r in records if r.WhichOneof("record_type") == "run"][-1]
    assert {"ot_p", "MNISTDataModule"} <= set(tags)
    metrics = [r.metric for r in records if r.WhichOneof("record_type") == "metric"]
    assert any(m.glob_name == "*" and m.step_metric == "epoch" for m in metrics)
    val_acc = [m for m in metrics if m.name == "val/acc"][-1]
    assert val_acc.summary.max and val_acc.summary.last
    # The summary holds the best and the last val/acc of the run, as the CSV log has them.
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update({"/".join(u.nested_key) or u.key: json.loads(u.value_json) for u in r.summary.update})
    curve = [row["val/acc"] for _, row in sorted(read_curves(next((tmp_path / "csv").glob("version_*/metrics.csv")),
                                                             keys=None).items())]
    assert summary["val/acc"]["max"] == pytest.approx(max(curve))
    assert summary["val/acc"]["last"] == pytest.approx(curve[-1])
    # The cluster-size histograms moved from the system into the callback, drawn with the pictures, at epochs 0 and 1.
    history = [{"/".join(i.nested_key) or i.key for i in r.history.item} for r in records
               if r.WhichOneof("record_type") == "history"]
    with_sizes = [keys for keys in history if "val/cluster_sizes/_type" in keys or "val/cluster_sizes" in keys]
    assert len(with_sizes) == 2 and all("heldout/cluster_sizes/_type" in k or "heldout/cluster_sizes" in k
                                        for k in with_sizes)


def test_a_clusterfigures_given_in_trainer_callbacks_replaces_the_default(tmp_path):
    common = ["--config", SMOKE, "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false"]
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=[*common, "--figures.every_n_epochs", "5", "--figures.gallery_size", "3"])
    (default,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, ClusterFigures)]
    assert (default.every_n_epochs, default.gallery_size) == (5, 3)
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=[*common, "--trainer.callbacks+=lit_otclust.figures.ClusterFigures",
                             "--trainer.callbacks.every_n_epochs", "7"])
    (given,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, ClusterFigures)]
    assert given.every_n_epochs == 7


def test_checkpoints_go_to_wandb_only_when_asked_and_online(tmp_path, monkeypatch):
    def wandb_logger(*extra):
        cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                           args=["--config", SMOKE, "--trainer.default_root_dir", str(tmp_path), *extra])
        return next(lg for lg in cli.trainer.loggers if isinstance(lg, L.pytorch.loggers.WandbLogger))

    assert wandb_logger()._log_model is False
    # Offline, WandbLogger would refuse log_model; the run goes on without artifacts, saying why.
    with pytest.warns(UserWarning, match="log_model='all' is ignored: W&B runs offline"):
        assert wandb_logger("--wandb.log_model", "all")._log_model is False
    monkeypatch.setenv("WANDB_MODE", "online")  # building the logger starts no run: no network is touched
    assert wandb_logger("--wandb.log_model", "all")._log_model == "all"
    assert wandb_logger("--wandb.log_model", "true")._log_model is True


def test_run_tags_name_the_method_and_the_data():
    config = {"phases": {"pretrain_epochs": 0},
              "data": {"class_path": "lit_otclust.data.CIFAR10DataModule", "init_args": {}}}
    assert run_tags(config, None) == ["ae_kmeans", "CIFAR10DataModule"]
    assert run_tags(config, OTLoss()) == ["ot", "CIFAR10DataModule"]
    config["phases"]["pretrain_epochs"] = 50
    assert run_tags(config, SoftKMeans()) == ["soft_kmeans_p", "CIFAR10DataModule"]


@pytest.mark.parametrize("num_clusters", [6, 8], ids=["K=C", "K>C"])
def test_matched_confusion_is_the_confusion_matrix_of_the_matched_predictions(num_clusters):
    gen = torch.Generator().manual_seed(0)
    num_classes, n = 6, 600
    y = torch.randint(num_classes, (n,), generator=gen)
    # Clusters that mostly follow a permutation of the classes, with 30% noise.
    pred = torch.randperm(num_clusters, generator=gen)[y]
    noise = torch.rand(n, generator=gen) < 0.3
    pred[noise] = torch.randint(num_clusters, (int(noise.sum()),), generator=gen)
    matrix, order, matching = matched_confusion(pred, y, num_clusters, num_classes)
    assert sorted(order.tolist()) == list(range(num_clusters))
    # sklearn's confusion_matrix(predicted class, class): row i counts the cluster matched to class i.
    reference = confusion_matrix(matching[pred].numpy(), y.numpy(), labels=range(-1, num_classes))[1:, 1:]
    np.testing.assert_array_equal(matrix[:num_classes].numpy(), reference[:num_classes])
    # Unmatched clusters come last and hold their own counts.
    for i, k in enumerate(order[num_classes:].tolist(), start=num_classes):
        assert matching[k] == -1
        np.testing.assert_array_equal(matrix[i].numpy(), np.bincount(y[pred == k].numpy(), minlength=num_classes))
    assert matrix.sum() == n
    acc = hungarian_accuracy(pred, y, num_clusters, num_classes)["acc"]
    assert matrix.diagonal().sum().item() / n == pytest.approx(float(acc))


def test_display_images_shows_flat_grey_and_colour_images_each_scaled_to_unit_range():
    gen = torch.Generator().manual_seed(0)
    mnist = torch.rand(4, 784, generator=gen)
    out = display_images(mnist)
    assert out.shape == (4, 28, 28, 3)
    np.testing.assert_allclose(out[1, 3, 5], out[1, 3, 5, 0])  # grey: three equal channels
    lo, hi = mnist[1].min(), mnist[1].max()
    assert out[1, 3, 5, 0] == pytest.approx(float((mnist[1, 3 * 28 + 5] - lo) / (hi - lo)), abs=1e-6)
    cifar = torch.randn(2, 3, 32, 32, generator=gen) * 2 + 1  # z-scored, not in [0, 1]
    out = display_images(cifar)
    assert out.shape == (2, 32, 32, 3)
    for i in range(2):
        assert out[i].min() == pytest.approx(0.0) and out[i].max() == pytest.approx(1.0)
    lo, hi = cifar[0].min(), cifar[0].max()
    assert out[0, 7, 9, 2] == pytest.approx(float((cifar[0, 2, 7, 9] - lo) / (hi - lo)), abs=1e-6)  # channel last
    np.testing.assert_array_equal(display_images(cifar.flatten(1)), out)  # flattened CIFAR reads back the same
    assert display_images(torch.rand(3, 1, 28, 28)).shape == (3, 28, 28, 3)
    assert np.isfinite(display_images(torch.ones(1, 784))).all()  # a constant image does not divide by 0
    with pytest.raises(ValueError, match="square"):
        display_images(torch.rand(2, 100 + 1))


def test_nearest_to_centers_and_pca_match_brute_force_and_sklearn():
    gen = torch.Generator().manual_seed(0)
    z, centers = torch.randn(200, 5, generator=gen), torch.randn(4, 5, generator=gen)
    near = nearest_to_centers(z, centers, 6)
    brute = torch.cdist(centers, z).argsort(1)[:, :6]
    assert torch.equal(near, brute)
    z = z * torch.tensor([5.0, 1, 3, 0.5, 0.2])  # distinct variances: well-separated axes
    points, projected = pca_2d(z, centers)
    reference = PCA(2).fit(z.numpy())
    # Equal up to each axis' sign (which pca_2d fixes by its own rule).
    np.testing.assert_allclose(np.abs(points.numpy()), np.abs(reference.transform(z.numpy())), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.abs(projected.numpy()), np.abs(reference.transform(centers.numpy())), rtol=1e-4, atol=1e-4)
    assert projected.shape == (4, 2)


class ImageData(L.LightningDataModule):
    """Random CIFAR-shaped images in memory, with the attributes ClusterFigures reads."""

    num_classes = 3
    batch_size = 30

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.fit_set = InMemoryDataset(torch.randn(90, 3, 32, 32, generator=gen), torch.arange(90) % 3)
        self.heldout_set = None

    def predict_dataloader(self):
        return torch.utils.data.DataLoader(self.fit_set, batch_size=45, collate_fn=passthrough)


def test_drawing_renders_colour_images_and_leaves_the_module_as_it_was(tmp_path):
    ae = ConvAutoencoder((3, 32, 32), channels=(4, 8), kernel_sizes=(3, 3), latent_dim=4)
    ae.encoder.append(nn.BatchNorm1d(4))  # its running statistics would move if embedding ran in train mode
    model = DeepClustering(ae, num_clusters=3, proportions=[0.5, 0.3, 0.2], loss=OTLoss(solver="solve"))
    model.joint = True
    model.centers.data.normal_(generator=torch.Generator().manual_seed(1))
    callback = ClusterFigures(gallery_size=4, max_points=50)
    trainer = L.Trainer(default_root_dir=tmp_path, accelerator="cpu", logger=False, callbacks=[callback],
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.predict(model, datamodule=ImageData())
    expected = {f"{n}_final.png" for n in FIGURE_NAMES} | {"confusion_final.csv"}
    assert {p.name for p in (tmp_path / "figures").iterdir()} == expected
    # Drawn from a module in train mode: embedding switches to eval and back, and writes nothing.
    model.train()
    model.autoencoder.decoder.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    files = callback.draw(trainer, model, "check", 0)
    assert set(files) == set(FIGURE_NAMES)
    assert model.training and model.autoencoder.encoder.training and not model.autoencoder.decoder.training
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_the_drawn_plan_solves_the_models_problem_with_its_proportions():
    model = DeepClustering(ConvAutoencoder((3, 32, 32), channels=(4,), kernel_sizes=(3,), latent_dim=3),
                           num_clusters=3, proportions=[0.6, 0.3, 0.1], loss=OTLoss(0.05))
    model.centers.data = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    z = torch.randn(50, 3, generator=torch.Generator().manual_seed(0))
    res = model.loss.plan(z, model.centers, model.proportions)
    assert res.converged
    torch.testing.assert_close(res.plan.sum(0), torch.tensor([0.6, 0.3, 0.1]), atol=1e-4, rtol=0)
    torch.testing.assert_close(res.plan.sum(1), torch.full((50,), 1 / 50), atol=1e-6, rtol=0)


@pytest.mark.parametrize("num_clusters", [10, pytest.param(30, marks=pytest.mark.slow)])
def test_every_text_of_every_picture_lies_inside_its_figure(num_clusters):
    """The pictures place their axes by explicit margins (plots._margins), not by matplotlib's layout engine: no tick
    label, axis label, title or colorbar label may be cut by the figure's edge, with 10 clusters and with 30 (labels
    rotated, one colorbar fewer), long labels included."""
    K, C = num_clusters, 10
    torch.manual_seed(0)
    labels = [f"{k}->{k % C}" for k in range(K)]
    sizes = torch.rand(K) / K
    head = "epoch 199, 70000 samples, accuracy 0.873"
    figures = {
        "gallery": gallery_figure(np.random.default_rng(0).random((K, 8, 28, 28, 3)),
                                  [f"{lab}  {s:.1%}" for lab, s in zip(labels, sizes)], None, f"{head}\nrows: ..."),
        "confusion": confusion_figure(torch.randint(0, 70000, (K, C)), labels, [str(c) for c in range(C)], head),
        "embedding": embedding_figure(torch.randn(500, 2) * 30, torch.randn(K, 2) * 30, torch.randint(0, K, (500,)),
                                      torch.randint(0, C, (500,)), K, C, head),
        "sizes": sizes_figure(sizes, torch.full((K,), 1 / K), labels, head),
        "plan": plan_figure(torch.softmax(torch.randn(300, K), 1) / 300, torch.randint(0, K, (300,)), torch.arange(K),
                            labels, f"Sinkhorn plan of a batch of 300\n{head}"),
    }
    for name, fig in figures.items():
        fig.canvas.draw()
        # What was drawn, in inches: tick labels within the view only (matplotlib's measure for bbox_inches="tight").
        drawn = fig.get_tightbbox(fig.canvas.get_renderer())
        width, height = fig.get_size_inches()
        assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, \
            (name, drawn.extents, (width, height))
