"""A user's own images: image folders and array files, through the data modules and the CLI.

Real files only: PNGs of MNIST test digits written on the fly (some of another size), arrays
saved with numpy/torch, and ``python -m lit_otclust fit`` then ``predict`` as subprocesses.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image

from lit_otclust.data import (ArrayDataModule, ImageFolderDataModule, MNISTDataModule, ResumableLoader,
                              geometric_proportions, proportional_counts)
from lit_otclust.data.folder import UnreadableImagesError
from lit_otclust.models import MLPAutoencoder

REPO = Path(__file__).resolve().parents[1]
FOLDER_CONFIG = str(REPO / "configs" / "folder_example.yaml")
DIGITS = (0, 1, 7)  # three classes that look different
PER_CLASS = 12
OTHER_SIZE = (32, 30)  # (W, H) of every 4th image: unequal sizes must be resized


def _write_digits(data_dir: Path, root: Path, flat: bool) -> list[Path]:
    """PNGs of 12 MNIST test digits per class: ``root/d<digit>/NN.png``, or ``root/d<digit>_NN.png`` if flat."""
    mnist = torchvision.datasets.MNIST(data_dir, train=False, download=False)
    paths = []
    for digit in DIGITS:
        rows = torch.nonzero(mnist.targets == digit).flatten()[:PER_CLASS].tolist()
        for j, row in enumerate(rows):
            image = Image.fromarray(mnist.data[row].numpy())
            if j % 4 == 3:
                image = image.resize(OTHER_SIZE)
            path = root / (f"d{digit}_{j:02d}.png" if flat else f"d{digit}/{j:02d}.png")
            path.parent.mkdir(parents=True, exist_ok=True)
            image.save(path)
            paths.append(path)
    return paths


@pytest.fixture(scope="module")
def folders(data_dir: Path, tmp_path_factory) -> dict[str, tuple[Path, list[Path]]]:
    """{"labelled": (root, files), "flat": (root, files)}: the same 36 digits in both layouts."""
    base = tmp_path_factory.mktemp("images")
    return {name: (base / name, _write_digits(data_dir, base / name, flat=name == "flat")) for name in ("labelled", "flat")}


def _commands(root: Path, out: Path, extra: list[str]) -> tuple[list[str], list[str]]:
    """The README's fit and predict commands on ``root``, shrunk: 2 epochs of 3 batches of 12."""
    common = ["--config", FOLDER_CONFIG, "--data.data_dir", str(root), "--data.batch_size", "12",
              "--trainer.default_root_dir", str(out), "--trainer.enable_progress_bar", "false", *extra]
    return (["fit", *common, "--trainer.max_epochs", "2", "--phases.pretrain_epochs", "1", "--phases.kmeans_n_init", "1"],
            ["predict", *common, "--ckpt_path", str(out / "checkpoints" / "last.ckpt")])


def _fit_then_predict(root: Path, out: Path) -> list[subprocess.CompletedProcess]:
    """``python -m lit_otclust fit ...`` then ``predict ...`` as subprocesses, as a user runs them."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    done = []
    for cmd in _commands(root, out, []):
        done.append(subprocess.run([sys.executable, "-m", "lit_otclust", *cmd], cwd=REPO, env=env,
                                   capture_output=True, text=True, timeout=400))
        if done[-1].returncode != 0:
            break
    return done


@pytest.fixture(scope="module")
def cli_runs(folders, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """{"labelled": (root, stderr of both subprocesses), "flat": (root, log)}: fit then predict on each folder.

    The class folder goes through ``python -m lit_otclust`` in subprocesses; meanwhile the flat
    folder goes through the same CLI (``lit_otclust.cli.main``) in this process, which has paid
    for the imports already: ~15 s of every subprocess on this 2-core machine.
    """
    import wandb

    from lit_otclust.cli import main

    outs = {name: tmp_path_factory.mktemp(f"run_{name}") for name in ("labelled", "flat")}
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    notes = logging.getLogger("lightning.pytorch")
    with ThreadPoolExecutor(1) as pool, pytest.MonkeyPatch.context() as mp:
        labelled = pool.submit(_fit_then_predict, folders["labelled"][0], outs["labelled"])
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        notes.addHandler(handler)
        try:
            for cmd in _commands(folders["flat"][0], outs["flat"], ["--data.labelled", "false", "--data.num_classes", "3"]):
                main(cmd)
                wandb.finish()  # in one process, the next WandbLogger would otherwise reuse this run
        finally:
            notes.removeHandler(handler)
        procs = labelled.result()
    for proc in procs:
        assert proc.returncode == 0, (proc.args, proc.stderr[-4000:])
    assert len(procs) == 2
    return {"labelled": (outs["labelled"], "".join(p.stderr for p in procs)), "flat": (outs["flat"], log.getvalue())}


def _predictions(out: Path) -> list[dict[str, str]]:
    with open(out / "predictions.csv") as fh:
        return list(csv.DictReader(fh))


def _logged_keys(out: Path) -> set[str]:
    with open(sorted((out / "csv").glob("version_*/metrics.csv"))[-1]) as fh:
        return set(next(csv.reader(fh)))


@pytest.mark.slow
def test_fit_then_predict_on_a_class_folder_names_every_file_once(cli_runs, folders) -> None:
    out, _ = cli_runs["labelled"]
    rows = _predictions(out)
    files = [Path(r["file"]).resolve() for r in rows]
    assert len(files) == len(set(files)) and set(files) == {p.resolve() for p in folders["labelled"][1]}
    assert [int(r["index"]) for r in rows] == list(range(len(rows)))
    for row, path in zip(rows, files):
        assert 0 <= int(row["cluster"]) < len(DIGITS) and 0 <= int(row["matched_class"]) < len(DIGITS)
        # The classes are the sorted sub-folders d0, d1, d7: the label must be its file's folder.
        assert int(row["label"]) == DIGITS.index(int(path.parent.name[1:]))
    assert {"val/acc", "val/nmi", "val/ari", "val/size_max"} <= _logged_keys(out)


@pytest.mark.slow
def test_fit_then_predict_on_an_unlabelled_folder_leaves_labels_empty(cli_runs, folders) -> None:
    out, log = cli_runs["flat"]
    rows = _predictions(out)
    files = [Path(r["file"]).resolve() for r in rows]
    assert len(files) == len(set(files)) and set(files) == {p.resolve() for p in folders["flat"][1]}
    assert all(0 <= int(r["cluster"]) < 3 and r["label"] == "" and r["matched_class"] == "" for r in rows)
    keys = _logged_keys(out)
    # Label-based metrics are skipped (with a note, not a crash); the cluster sizes are still logged.
    assert not any(k.split("/")[-1].startswith(("acc", "nmi", "ari")) for k in keys), keys
    assert {"val/size_min", "val/size_max", "val/size_entropy"} <= keys
    assert "have no labels" in log


@pytest.mark.slow
def test_cli_links_num_classes_and_input_shape_from_the_folder(folders, tmp_path, monkeypatch) -> None:
    from lit_otclust.cli import OTClusterCLI
    from lit_otclust.system import DeepClustering

    monkeypatch.setenv("WANDB_MODE", "disabled")

    def build(*args: str) -> OTClusterCLI:
        return OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                            args=["--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path), *args])

    root = str(folders["labelled"][0])
    cli = build("--config", FOLDER_CONFIG, "--data.data_dir", root, "--data.batch_size", "12", "--data.grayscale", "true",
                "--data.image_size", "16")
    assert cli.datamodule.num_classes == 3 and cli.datamodule.input_shape == (1, 16, 16)
    assert cli.model.centers.shape[0] == 3 and tuple(cli.model.autoencoder.input_shape) == (1, 16, 16)
    cli = build("--config", FOLDER_CONFIG, "--data.data_dir", str(folders["flat"][0]), "--data.batch_size", "12",
                "--data.labelled", "false", "--data.num_classes", "4")
    assert cli.model.centers.shape[0] == 4 and tuple(cli.model.autoencoder.input_shape) == (3, 32, 32)
    # class_proportions and the model's proportions stated once, through a YAML anchor.
    config = tmp_path / "imbalanced.yaml"
    config.write_text(f"seed_everything: 0\ndata:\n  class_path: lit_otclust.data.ImageFolderDataModule\n  init_args:\n"
                      f"    data_dir: {root}\n    batch_size: 4\n    class_proportions: &w [0.6, 0.3, 0.1]\n"
                      f"model:\n  autoencoder:\n    class_path: lit_otclust.models.MLPAutoencoder\n  proportions: *w\n")
    cli = build("--config", str(config))
    torch.testing.assert_close(cli.model.proportions, torch.tensor([0.6, 0.3, 0.1]))
    assert cli.datamodule.class_proportions == [0.6, 0.3, 0.1]


# ---- the folder module ------------------------------------------------------------------------


@pytest.mark.slow
def test_folder_module_decodes_resizes_and_serves_batches(folders) -> None:
    root, files = folders["labelled"]
    module = ImageFolderDataModule(str(root), grayscale=True, batch_size=8, eval_batch_size=10)
    assert (module.num_classes, module.input_shape, module.classes) == (3, (1, 28, 28), ["d0", "d1", "d7"])
    module.setup()
    fit = module.fit_set
    assert fit.x.shape == (36, 1, 28, 28) and fit.x.dtype == torch.float32 and module.heldout_set is None
    assert fit.paths == [str(p) for p in sorted(files)]
    resized = [i for i, p in enumerate(fit.paths) if Image.open(p).size == OTHER_SIZE]
    assert len(resized) == 9
    for i in (0, 13, 34, *resized):
        pixels = torch.from_numpy(np.asarray(Image.open(fit.paths[i]))).float()  # second code path: PIL
        if i in resized:  # the documented resize: bilinear with antialiasing, back to the first image's 28 x 28
            pixels = F.interpolate(pixels[None, None], size=(28, 28), mode="bilinear", antialias=True)[0, 0]
        torch.testing.assert_close(fit.x[i, 0], pixels / 255, atol=1 / 255 + 1e-6 if i in resized else 0, rtol=0)
    train = module.train_dataloader()
    assert isinstance(train, ResumableLoader)
    batches = list(train)
    assert [len(b[0]) for b in batches] == [8] * 4  # drop_last
    for x, y, index in batches:
        assert torch.equal(x, fit.x[index]) and torch.equal(y, fit.y[index])
    assert len(module.val_dataloader()) == 1  # no held-out folder: the fitted images only
    with pytest.raises(RuntimeError, match="no held-out samples"):
        module.test_dataloader()


@pytest.mark.slow
def test_folder_heldout_dir_uses_the_fitted_classes(folders, tmp_path) -> None:
    root, _ = folders["labelled"]
    heldout = tmp_path / "heldout"
    (heldout / "d7").mkdir(parents=True)
    Image.open(root / "d7" / "00.png").save(heldout / "d7" / "a.png")
    module = ImageFolderDataModule(str(root), heldout_dir=str(heldout), batch_size=8)
    module.setup()
    assert module.heldout_set.y.tolist() == [2] and len(module.val_dataloader()) == 2
    assert torch.equal(module.heldout_set.x[0], module.fit_set.x[module.fit_set.paths.index(str(root / "d7" / "00.png"))])


# ---- the array module -------------------------------------------------------------------------


def test_array_module_reads_npy_npz_and_pt_as_saved(tmp_path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(20, 6, 5), dtype=np.uint8)  # (N, H, W)
    values = rng.choice([3, 5, 9], size=20)  # labels need not be 0..C-1
    expected_x = torch.from_numpy(images.astype(np.float32) / 255)[:, None]  # (N, 1, H, W)
    expected_y = torch.from_numpy(np.searchsorted([3, 5, 9], values))
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", values)
    np.savez(tmp_path / "xy.npz", x=images, y=values)
    np.savez(tmp_path / "x_only.npz", x=images)
    torch.save({"x": torch.from_numpy(images), "y": torch.from_numpy(values)}, tmp_path / "xy.pt")
    labelled = [ArrayDataModule(str(tmp_path / "x.npy"), labels_path=str(tmp_path / "y.npy"), batch_size=4),
                ArrayDataModule(str(tmp_path / "xy.npz"), batch_size=4),
                ArrayDataModule(str(tmp_path / "xy.pt"), batch_size=4)]
    for module in labelled:
        assert (module.num_classes, module.input_shape, module.classes) == (3, (1, 6, 5), [3, 5, 9])
        module.setup()
        assert torch.equal(module.fit_set.x, expected_x) and torch.equal(module.fit_set.y, expected_y)
    for path in ("x.npy", "x_only.npz"):
        module = ArrayDataModule(str(tmp_path / path), num_classes=4, batch_size=4)
        module.setup()
        assert module.num_classes == 4 and torch.equal(module.fit_set.x, expected_x)
        assert torch.equal(module.fit_set.y, torch.full((20,), -1)) and module.fit_set.paths is None
    # Channels-last uint8 and channels-first float, each against numpy's own transposition.
    rgb = rng.integers(0, 256, size=(7, 8, 8, 3), dtype=np.uint8)
    np.save(tmp_path / "rgb.npy", rgb)
    module = ArrayDataModule(str(tmp_path / "rgb.npy"), num_classes=2, batch_size=2)
    module.setup()
    assert module.input_shape == (3, 8, 8)
    assert torch.equal(module.fit_set.x, torch.from_numpy(rgb.transpose(0, 3, 1, 2).astype(np.float32) / 255))
    floats = rng.standard_normal((7, 2, 4, 4)).astype(np.float32)
    np.savez(tmp_path / "floats.npz", x=floats)
    module = ArrayDataModule(str(tmp_path / "floats.npz"), num_classes=2, batch_size=2)
    module.setup()
    assert module.input_shape == (2, 4, 4) and torch.equal(module.fit_set.x, torch.from_numpy(floats))  # not / 255
    module = ArrayDataModule(str(tmp_path / "floats.npz"), num_classes=2, batch_size=2, channels_last=True)
    module.setup()  # the same array read as (N, H, W, C) = (7, 2, 4, 4) when told so
    assert module.input_shape == (4, 2, 4) and torch.equal(module.fit_set.x, torch.from_numpy(floats.transpose(0, 3, 1, 2)))
    standard = ArrayDataModule(str(tmp_path / "floats.npz"), num_classes=2, batch_size=2, scaling="standard")
    standard.setup()
    mean, std = floats.mean(axis=(0, 2, 3), keepdims=True), floats.std(axis=(0, 2, 3), ddof=1, keepdims=True)
    torch.testing.assert_close(standard.fit_set.x, torch.from_numpy((floats - mean) / std))


def test_array_module_reads_features_from_a_file_and_from_memory(tmp_path) -> None:
    """(N, d) features (a pretrained network's embeddings): input_shape (d,), served as saved, and the MLP
    autoencoder takes them; the same array in memory (from_arrays) gives the same module."""
    rng = np.random.default_rng(0)
    features = rng.standard_normal((20, 7)).astype(np.float32)
    values = rng.choice([3, 5, 9], size=20)
    np.savez(tmp_path / "emb.npz", x=features, y=values)
    from_file = ArrayDataModule(str(tmp_path / "emb.npz"), batch_size=4)
    in_memory = ArrayDataModule.from_arrays(features, values, batch_size=4)
    unlabelled = ArrayDataModule.from_arrays(torch.from_numpy(features), num_classes=2, batch_size=4)
    for module in (from_file, in_memory, unlabelled):
        module.setup()
        assert module.input_shape == (7,) and torch.equal(module.fit_set.x, torch.from_numpy(features))
    assert (from_file.num_classes, in_memory.classes) == (3, [3, 5, 9])
    assert torch.equal(in_memory.fit_set.y, from_file.fit_set.y)
    assert torch.equal(unlabelled.fit_set.y, torch.full((20,), -1))
    x, _, _ = next(iter(in_memory.train_dataloader()))
    z, x_hat = MLPAutoencoder(in_memory.input_shape, hidden_dims=(8,), latent_dim=2)(x)
    assert x.shape == x_hat.shape == (4, 7) and z.shape == (4, 2)
    features[0, 0] = 100.0  # the module copied the caller's array in setup
    assert in_memory.fit_set.x[0, 0] != 100.0
    with pytest.raises(ValueError, match="the array x holds int64 features"):
        ArrayDataModule.from_arrays(np.zeros((4, 3), dtype=np.int64), num_classes=2)


def test_array_module_standardizes_each_feature(tmp_path) -> None:
    features = np.random.default_rng(0).standard_normal((20, 7)).astype(np.float32) * 3 + 1
    module = ArrayDataModule.from_arrays(features, num_classes=2, batch_size=4, scaling="standard")
    module.setup()
    expected = (features - features.mean(0)) / features.std(0, ddof=1)
    torch.testing.assert_close(module.fit_set.x, torch.from_numpy(expected))


# ---- errors name the file or setting ----------------------------------------------------------


@pytest.mark.slow
def test_errors_name_the_file_or_setting(folders, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no such folder") as error:
        ImageFolderDataModule(str(tmp_path / "missing"))
    assert str(tmp_path / "missing") in str(error.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no class sub-folders"):
        ImageFolderDataModule(str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="holds no images") as error:
        ImageFolderDataModule(str(tmp_path / "empty"), labelled=False, num_classes=2)
    assert str(tmp_path / "empty") in str(error.value)
    (tmp_path / "classes" / "a").mkdir(parents=True)
    (tmp_path / "classes" / "b").mkdir()
    Image.new("L", (4, 4)).save(tmp_path / "classes" / "a" / "0.png")
    with pytest.raises(FileNotFoundError) as error:
        ImageFolderDataModule(str(tmp_path / "classes"))
    assert str(tmp_path / "classes" / "b") in str(error.value)
    bad = tmp_path / "classes" / "b" / "broken.png"
    bad.write_bytes(b"not a png at all")
    with pytest.raises(UnreadableImagesError, match="cannot be read") as error:  # the first image is fine
        ImageFolderDataModule(str(tmp_path / "classes"), batch_size=1)
    assert str(bad) in str(error.value)
    with pytest.raises(ValueError, match="num_classes"):
        ImageFolderDataModule(str(folders["flat"][0]), labelled=False)
    with pytest.raises(ValueError, match="num_classes=5 but"):
        ImageFolderDataModule(str(folders["labelled"][0]), num_classes=5)

    np.save(tmp_path / "flat.npy", np.zeros(10, dtype=np.uint8))
    with pytest.raises(ValueError, match=r"rank 1") as error:
        ArrayDataModule(str(tmp_path / "flat.npy"), num_classes=2)
    assert str(tmp_path / "flat.npy") in str(error.value)
    np.save(tmp_path / "x.npy", np.zeros((10, 4, 4), dtype=np.uint8))
    np.save(tmp_path / "y9.npy", np.zeros(9, dtype=np.int64))
    with pytest.raises(ValueError, match="has 9 labels but") as error:
        ArrayDataModule(str(tmp_path / "x.npy"), labels_path=str(tmp_path / "y9.npy"))
    assert str(tmp_path / "y9.npy") in str(error.value) and str(tmp_path / "x.npy") in str(error.value)
    with pytest.raises(FileNotFoundError, match="no such file") as error:
        ArrayDataModule(str(tmp_path / "nope.npz"))
    assert str(tmp_path / "nope.npz") in str(error.value)
    np.savez(tmp_path / "noimages.npz", images=np.zeros((3, 4, 4), dtype=np.uint8))
    with pytest.raises(ValueError, match="no array 'x'") as error:
        ArrayDataModule(str(tmp_path / "noimages.npz"), num_classes=2)
    assert str(tmp_path / "noimages.npz") in str(error.value)
    np.save(tmp_path / "ints.npy", np.zeros((10, 4, 4), dtype=np.int32))
    with pytest.raises(ValueError, match="int32 images"):
        ArrayDataModule(str(tmp_path / "ints.npy"), num_classes=2)


# ---- imbalanced subsamples --------------------------------------------------------------------


@pytest.mark.slow
def test_class_proportions_subsample_has_the_requested_counts_and_is_seeded(folders) -> None:
    root, _ = folders["labelled"]

    def build(seed: int, **kwargs) -> ImageFolderDataModule:
        module = ImageFolderDataModule(str(root), grayscale=True, batch_size=2, seed=seed,
                                       class_proportions=[0.6, 0.3, 0.1], **kwargs)
        module.setup()
        return module

    # 12 images a class: class 0 (w = 0.6) runs out first and is kept whole: 12, then 6 and 2.
    first, again, other = build(0), build(0), build(1)
    assert torch.bincount(first.fit_set.y).tolist() == [12, 6, 2]
    # The labels are those of the files' folders: the subsample kept each file with its own class.
    assert [DIGITS.index(int(Path(p).parent.name[1:])) for p in first.fit_set.paths] == first.fit_set.y.tolist()
    assert first.fit_set.paths == again.fit_set.paths and torch.equal(first.fit_set.x, again.fit_set.x)
    assert first.fit_set.paths != other.fit_set.paths
    assert torch.bincount(build(0, subset=10).fit_set.y).tolist() == [6, 3, 1]  # exactly subset, same shares
    with pytest.raises(ValueError, match="asks class 0 for 13 samples but it has 12"):
        build(0, subset=21)


@pytest.mark.slow
def test_class_proportions_on_mnist_keep_the_largest_class_whole(data_dir) -> None:
    w = geometric_proportions(10, 10.0)
    module = MNISTDataModule(str(data_dir), download=False, fit_split="test", class_proportions=w, batch_size=100)
    module.setup()
    counts = torch.bincount(module.fit_set.y, minlength=10)
    # Class 0 has the largest share and (980 of the test split's 980-1135 per class) binds first:
    # it is kept whole and the smallest class gets a tenth of it.
    assert counts[0] == 980 and counts[9] == 98
    assert (counts.diff() <= 0).all()
    torch.testing.assert_close(counts.double() / counts.sum(), torch.tensor(w, dtype=torch.float64), atol=2e-3, rtol=0)
    assert torch.equal(torch.bincount(module.heldout_set.y, minlength=10), counts)  # same split, same draw rule


def test_geometric_proportions_and_proportional_counts() -> None:
    for num_classes, ratio in ((2, 1.0), (3, 4.0), (10, 100.0)):
        w = torch.tensor(geometric_proportions(num_classes, ratio), dtype=torch.float64)
        assert float(w.sum()) == pytest.approx(1.0, abs=1e-12) and float(w[0] / w[-1]) == pytest.approx(ratio)
        torch.testing.assert_close(w[1:] / w[:-1], torch.full((num_classes - 1,), ratio ** (-1 / (num_classes - 1)),
                                                              dtype=torch.float64))
    # A class with no samples but a share, and too few samples for a requested size, are errors.
    with pytest.raises(ValueError, match="no samples"):
        proportional_counts(torch.tensor([5, 0]), [0.5, 0.5])
    assert proportional_counts(torch.tensor([5, 0, 7]), [0.5, 0.0, 0.5]).tolist() == [5, 0, 5]
    assert proportional_counts(torch.tensor([10, 10, 10]), [1 / 3, 1 / 3, 1 / 3], size=10).tolist() == [4, 3, 3]
    with pytest.raises(ValueError, match="has 2 entries but the data have 10 classes"):
        MNISTDataModule(download=False, class_proportions=[0.5, 0.5])
    with pytest.raises(ValueError, match="sum to 1"):
        MNISTDataModule(download=False, class_proportions=[0.2] * 10)


@pytest.mark.slow
def test_fit_warns_when_the_model_is_not_told_the_class_proportions(folders) -> None:
    from lit_otclust.losses import OTLoss
    from lit_otclust.models import MLPAutoencoder
    from lit_otclust.phases import PhaseSwitch
    from lit_otclust.system import DeepClustering

    w = [0.6, 0.3, 0.1]

    def fit(proportions: list[float] | None) -> list[str]:
        data = ImageFolderDataModule(str(folders["labelled"][0]), grayscale=True, batch_size=4, class_proportions=w)
        model = DeepClustering(MLPAutoencoder(data.input_shape, hidden_dims=(8,), latent_dim=2), num_clusters=3,
                               loss=OTLoss(solver="solve"), proportions=proportions)
        trainer = L.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            callbacks=[PhaseSwitch(kmeans_n_init=1)])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(model, datamodule=data)
        return [str(c.message) for c in caught if "class_proportions" in str(c.message)]

    uniform = fit(None)  # the OT loss would prescribe 1/3 each
    assert len(uniform) == 1 and "--model.proportions" in uniform[0]
    assert fit(w) == []


# ---- decoding: bit depth, transparency, orientation -------------------------------------------


def _decoded(folder: Path, grayscale: bool = True, **kwargs) -> dict[str, torch.Tensor]:
    """{file name: (C, H, W) pixels} as ImageFolderDataModule decodes the images of ``folder`` (unlabelled)."""
    module = ImageFolderDataModule(str(folder), labelled=False, num_classes=2, grayscale=grayscale, batch_size=1,
                                   **kwargs)
    module.setup()
    return {Path(path).name: x for path, x in zip(module.fit_set.paths, module.fit_set.x)}


def _pgm(path: Path, values: np.ndarray, maxval: int) -> None:
    """A binary 16-bit PGM written by hand (the netpbm format: header, then big-endian samples of 0..maxval)."""
    height, width = values.shape
    path.write_bytes(f"P5\n{width} {height}\n{maxval}\n".encode() + values.astype(">u2").tobytes())


def test_deep_images_are_scaled_by_their_range_not_clipped(tmp_path) -> None:
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 65536, size=(6, 5), dtype=np.uint16)
    raw[0, :2] = (0, 65535)
    Image.fromarray(raw).save(tmp_path / "png16.png")  # mode I;16
    Image.fromarray(raw.astype(">u2")).save(tmp_path / "tiff16b.tif")  # mode I;16B
    _pgm(tmp_path / "pgm16.pgm", raw, 65535)  # PIL reads it as mode I
    twelve = rng.integers(0, 4096, size=(6, 5))
    _pgm(tmp_path / "pgm12.pgm", twelve, 4095)  # a 12-bit PGM: its values are relative to its maxval
    wide = rng.integers(-70000, 70000, size=(6, 5)).astype(np.int32)
    Image.fromarray(wide).save(tmp_path / "int32.tif")  # mode I, values outside 16 bits: its own range
    unit = rng.random((6, 5), dtype=np.float32)
    Image.fromarray(unit).save(tmp_path / "unit.tif")  # mode F within [0, 1]: kept
    loose = (rng.standard_normal((6, 5)) * 50).astype(np.float32)
    Image.fromarray(loose).save(tmp_path / "loose.tif")  # mode F outside [0, 1]: its own range
    assert [Image.open(tmp_path / n).mode for n in ("png16.png", "tiff16b.tif", "pgm16.pgm", "int32.tif", "loose.tif")] \
        == ["I;16", "I;16B", "I", "I", "F"]

    def own_range(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.float64)
        return (a - a.min()) / (a.max() - a.min())

    expected = {"png16.png": raw / 65535, "tiff16b.tif": raw / 65535, "pgm16.pgm": raw / 65535,
                "pgm12.pgm": twelve / 4095, "int32.tif": own_range(wide), "unit.tif": unit, "loose.tif": own_range(loose)}
    for grayscale in (True, False):
        pixels = _decoded(tmp_path, grayscale)
        assert set(pixels) == set(expected)
        for name, reference in expected.items():
            x = pixels[name]
            assert x.dtype == torch.float32 and x.shape == (1 if grayscale else 3, 6, 5), name
            for channel in x:  # RGB repeats the one channel
                # 2e-6: float32 rounding; the 12-bit PGM: PIL stretches it to 16 bits, rounding to 1/65535.
                np.testing.assert_allclose(channel.numpy(), reference, rtol=0, atol=1e-5 if name == "pgm12.pgm" else 2e-6,
                                           err_msg=name)
    # NaN in a float image: unreadable, named, not a NaN loss later.
    Image.fromarray(np.float32([[0.5, np.nan]])).save(tmp_path / "nan.tif")
    with pytest.raises(UnreadableImagesError, match="NaN") as error:
        _decoded(tmp_path)
    assert str(tmp_path / "nan.tif") in str(error.value)


def _white_composite(colour: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Straight alpha over white, in [0, 1]: colour (H, W, C) and alpha (H, W) as 0..255 integers."""
    a = alpha[..., None] / 255.0
    return (colour * a + 255.0 * (1 - a)) / 255.0


def test_transparent_images_are_composited_onto_white(tmp_path) -> None:
    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, size=(7, 6, 4), dtype=np.uint8)
    rgba[0, :3, 3] = (0, 255, 128)  # fully transparent, opaque, half
    Image.fromarray(rgba, "RGBA").save(tmp_path / "rgba.png")
    la = rng.integers(0, 256, size=(7, 6, 2), dtype=np.uint8)
    la[0, :2, 1] = (0, 255)
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    pixels = _decoded(tmp_path, grayscale=False)
    # PIL composites in 8-bit integers: within one step of the exact value.
    np.testing.assert_allclose(pixels["rgba.png"].permute(1, 2, 0).numpy(), _white_composite(rgba[..., :3], rgba[..., 3]),
                               rtol=0, atol=1 / 255 + 1e-6)
    grey = _white_composite(la[..., :1], la[..., 1])[..., 0]
    for channel in pixels["la.png"]:
        np.testing.assert_allclose(channel.numpy(), grey, rtol=0, atol=1 / 255 + 1e-6)
    assert torch.equal(pixels["rgba.png"][:, 0, 0], torch.ones(3))  # the transparent pixel is white


def test_palette_images_read_their_colours_and_transparent_entries_read_white(tmp_path) -> None:
    rng = np.random.default_rng(2)
    palette = rng.integers(0, 256, size=(16, 3), dtype=np.uint8)
    index = rng.integers(0, 16, size=(7, 6), dtype=np.uint8)
    index[0, 0], index[0, 1] = 3, 5
    for name, transparency in (("plain.png", None), ("trns.png", 3), ("trns.gif", 3)):
        image = Image.fromarray(index, "P")
        image.putpalette(palette.flatten().tolist())
        image.save(tmp_path / name, **({} if transparency is None else {"transparency": transparency}))
    assert all(Image.open(tmp_path / n).mode == "P" for n in ("plain.png", "trns.png", "trns.gif"))
    pixels = _decoded(tmp_path, grayscale=False)
    colours = palette[index] / 255.0  # (H, W, 3): each pixel its palette entry
    np.testing.assert_array_equal(pixels["plain.png"].permute(1, 2, 0).numpy(), colours.astype(np.float32))
    see_through = colours.copy()
    see_through[index == 3] = 1.0  # entry 3 is transparent: white, whatever colour it holds
    for name in ("trns.png", "trns.gif"):
        np.testing.assert_array_equal(pixels[name].permute(1, 2, 0).numpy(), see_through.astype(np.float32), err_msg=name)


# EXIF orientation -> the stored array as a viewer shows it (the TIFF/EXIF specification's table), in numpy.
ORIENTATIONS = {1: lambda a: a, 2: np.fliplr, 3: lambda a: np.rot90(a, 2), 6: lambda a: np.rot90(a, -1),
                8: lambda a: np.rot90(a, 1)}


def _with_orientation(path: Path, pixels: np.ndarray, orientation: int, **save) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(pixels).save(path, exif=exif, **save)


def test_exif_orientation_is_applied_as_a_viewer_shows_the_image(tmp_path) -> None:
    stored = np.random.default_rng(3).integers(0, 256, size=(6, 10), dtype=np.uint8)  # (H, W) as stored
    for orientation, show in ORIENTATIONS.items():
        folder = tmp_path / ("upright" if orientation in (1, 2, 3) else "turned")
        folder.mkdir(exist_ok=True)
        _with_orientation(folder / f"o{orientation}.png", stored, orientation)
    for folder, shape in (("upright", (6, 10)), ("turned", (10, 6))):
        module = ImageFolderDataModule(str(tmp_path / folder), labelled=False, num_classes=2, grayscale=True,
                                       batch_size=1)
        assert module.input_shape == (1, *shape)  # image_size is the shown size
        module.setup()
        for path, x in zip(module.fit_set.paths, module.fit_set.x):
            show = ORIENTATIONS[int(Path(path).stem[1:])]
            np.testing.assert_array_equal(x[0].numpy(), (show(stored) / 255).astype(np.float32), err_msg=path)
    # A camera's JPEG: lossy, so within a few levels of a smooth picture turned by numpy.
    smooth = (np.add.outer(np.arange(16) * 8, np.arange(24) * 5) % 256).astype(np.uint8)  # (16, 24)
    (tmp_path / "jpeg").mkdir()
    _with_orientation(tmp_path / "jpeg" / "photo.jpg", smooth, 6, quality=95)
    x = _decoded(tmp_path / "jpeg")["photo.jpg"]
    assert x.shape == (1, 24, 16)
    np.testing.assert_allclose(x[0].numpy(), np.rot90(smooth, -1) / 255, rtol=0, atol=0.05)


# ---- unreadable files -------------------------------------------------------------------------


def _folder_state(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and modification time, to show nothing was moved or changed."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def damaged(tmp_path) -> tuple[Path, list[Path], dict[Path, str]]:
    """(root, readable files, {unreadable file: a word of its reason}): classes a, b; 10 good PNGs, 4 bad files."""
    root = tmp_path / "images"
    rng = np.random.default_rng(4)
    good = []
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(5):
            good.append(root / label / f"{i}.png")
            Image.fromarray(rng.integers(0, 256, size=(8, 8), dtype=np.uint8)).save(good[-1])
    jpeg, png = io.BytesIO(), io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)).save(jpeg, "JPEG")
    Image.fromarray(rng.integers(0, 256, size=(64, 64), dtype=np.uint8)).save(png, "PNG")
    bad = {root / "a" / "empty.png": "empty", root / "a" / "notes.png": "not an image",
           root / "b" / "cut.jpg": "truncated", root / "b" / "cut.png": "truncated"}
    (root / "a" / "empty.png").write_bytes(b"")
    (root / "a" / "notes.png").write_text("not an image at all")
    (root / "b" / "cut.jpg").write_bytes(jpeg.getvalue()[:len(jpeg.getvalue()) // 2])
    (root / "b" / "cut.png").write_bytes(png.getvalue()[:len(png.getvalue()) // 2])
    with Image.open(root / "b" / "cut.jpg") as header:  # its header reads: only decoding finds the damage
        assert header.size == (64, 64)
    return root, sorted(good), bad


def test_unreadable_files_stop_the_module_once_naming_count_reasons_and_the_full_list(damaged) -> None:
    root, good, bad = damaged
    before = _folder_state(root)
    with pytest.raises(UnreadableImagesError) as error:
        ImageFolderDataModule(str(root), grayscale=True, batch_size=2)
    message = str(error.value)
    assert message.startswith(f"4 of 14 image files under {root} cannot be read:")
    for path, reason in bad.items():  # every file named with its reason (4 <= the 5 shown)
        line = next(line for line in message.splitlines() if line.strip().startswith(f"{path}:"))
        assert reason in line, line
    listed = Path(re.search(r"All 4 are listed in (\S+);", message)[1])
    assert listed.is_file() and root not in listed.parents
    rows = [line.split("\t") for line in listed.read_text().splitlines()]
    assert {Path(path) for path, _ in rows} == set(bad) and len(rows) == 4
    assert "skip_unreadable" in message
    assert _folder_state(root) == before  # nothing moved, changed or added


def test_skip_unreadable_trains_on_the_readable_files_and_warns_once(damaged) -> None:
    root, good, bad = damaged
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = ImageFolderDataModule(str(root), grayscale=True, batch_size=2, skip_unreadable=True)
    said = [str(w.message) for w in caught if "cannot be read" in str(w.message)]
    assert len(said) == 1 and "4 of 14" in said[0] and str(module.unreadable_list) in said[0]
    assert {path for path, _ in module.unreadable} == set(bad)
    module.setup()
    assert module.fit_set.paths == [str(p) for p in good]
    assert module.fit_set.y.tolist() == [0] * 5 + [1] * 5  # each readable file keeps its folder's class
    for path, x in zip(good, module.fit_set.x):
        np.testing.assert_array_equal(x[0].numpy(), np.asarray(Image.open(path), dtype=np.float32) / 255)
    assert module.predict_dataloader().dataset.paths == module.fit_set.paths


def test_skip_unreadable_refuses_a_folder_with_nothing_readable(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "0.png").write_bytes(b"")
    with pytest.raises(UnreadableImagesError, match="no readable image is left in data_dir"):
        ImageFolderDataModule(str(tmp_path), labelled=False, num_classes=2, skip_unreadable=True, batch_size=1)


# ---- class names in predictions, the summary and the figures ----------------------------------


def test_predict_names_classes_in_the_file_the_summary_and_the_figures(tmp_path, capsys, monkeypatch) -> None:
    """Three named class folders and one unreadable file (skipped): predictions.csv carries each row's class names,
    the summary each cluster's size with its matched class's name, and the figures label classes by name; the
    reference matching is scipy's Hungarian algorithm on the (cluster, folder) counts of the written rows."""
    import lit_otclust.figures as figures
    from scipy.optimize import linear_sum_assignment

    from lit_otclust.callbacks import ClusterWriter, RunSummary
    from lit_otclust.figures import ClusterFigures
    from lit_otclust.models import MLPAutoencoder
    from lit_otclust.system import DeepClustering

    root, names = tmp_path / "images", ["cat", "dog", "fish"]
    rng = np.random.default_rng(5)
    for c, name in enumerate(names):  # a dark, a grey and a bright class
        (root / name).mkdir(parents=True)
        for i in range(6):
            pixels = np.clip(rng.normal(40 + 85 * c, 20, (8, 8)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    (root / "dog" / "broken.png").write_bytes(b"")
    data = ImageFolderDataModule(str(root), grayscale=True, batch_size=6, skip_unreadable=True)
    torch.manual_seed(0)
    model = DeepClustering(MLPAutoencoder(data.input_shape, hidden_dims=(8,), latent_dim=2), num_clusters=3)
    data.setup()
    with torch.no_grad():  # one center on an image of each class, so the clusters differ
        model.centers.copy_(model.embed(data.fit_set.x[[0, 6, 12]]))
    drawn, save_png = {}, figures.save_png

    def keep(fig, path):  # the figures as drawn, to read their tick labels
        drawn[path.stem.split("_")[0]] = fig
        return save_png(fig, path)

    monkeypatch.setattr(figures, "save_png", keep)
    trainer = L.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[ClusterWriter(str(tmp_path)), RunSummary(), ClusterFigures(gallery_size=2)])
    trainer.predict(model, datamodule=data)

    rows = _predictions(tmp_path)
    assert list(rows[0]) == ["index", "file", "cluster", "label", "label_name", "matched_class", "matched_class_name",
                             "distance"]
    assert len(rows) == 18 and not any(r["file"].endswith("broken.png") for r in rows)
    counts = np.zeros((3, 3), dtype=int)
    for r in rows:
        assert r["label_name"] == Path(r["file"]).parent.name == names[int(r["label"])]
        counts[int(r["cluster"]), names.index(r["label_name"])] += 1
    clusters, classes = linear_sum_assignment(counts, maximize=True)
    matched = dict(zip(clusters.tolist(), [names[c] for c in classes]))
    assert all(r["matched_class_name"] == matched[int(r["cluster"])] for r in rows)

    printed = capsys.readouterr().out
    sizes = ", ".join(f"{k}->{matched[k]}: {counts[k].sum()}" for k in range(3))
    assert f"  clusters     {sizes} (cluster->matched class: rows)" in printed
    assert re.search(rf"  unreadable   1 files not predicted \(listed in {re.escape(str(data.unreadable_list))}\)", printed)

    by_class = sorted(matched, key=lambda k: names.index(matched[k]))  # the figures' row order: class 0, 1, 2
    labels = [f"{k}->{matched[k]}" for k in by_class]
    confusion = drawn["confusion"].axes[0]
    assert [t.get_text() for t in confusion.get_xticklabels()] == names
    assert [t.get_text() for t in confusion.get_yticklabels()] == labels
    assert [t.get_text() for t in drawn["sizes"].axes[0].get_xticklabels()] == labels
    assert [t.get_text().split()[0] for t in drawn["gallery"].axes[0].get_yticklabels()] == labels


def test_long_class_names_stand_upright_instead_of_overlapping(tmp_path) -> None:
    """CIFAR-10's names under the columns of the confusion matrix, the sizes' bars and the plan: no two tick labels
    overlap and every text lies inside its figure."""
    from lit_otclust.plots import confusion_figure, plan_figure, sizes_figure

    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    labels = [f"{k}->{names[(k + 3) % 10]}" for k in range(10)]
    drawn = {"confusion": confusion_figure(torch.randint(0, 6000, (10, 10)), labels, names, "a title"),
             "sizes": sizes_figure(torch.full((10,), 0.1), torch.full((10,), 0.1), labels, "a title"),
             "plan": plan_figure(torch.softmax(torch.randn(300, 10), 1) / 300, torch.randint(0, 10, (300,)),
                                 torch.arange(10), labels, "a title")}
    for name, fig in drawn.items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ticks = [t.get_window_extent(renderer) for t in fig.axes[0].get_xticklabels()]
        assert all(a.x1 <= b.x0 for a, b in zip(ticks, ticks[1:])), name  # left to right, not overlapping
        drawn_box, (width, height) = fig.get_tightbbox(renderer), fig.get_size_inches()
        assert drawn_box.x0 >= -0.01 and drawn_box.y0 >= -0.01 and drawn_box.x1 <= width + 0.01 \
            and drawn_box.y1 <= height + 0.01, (name, drawn_box.extents)


def test_class_names_of_the_torchvision_modules() -> None:
    assert MNISTDataModule(download=False).class_names is None  # a digit is its own name
    assert MNISTDataModule(download=False, classes=[3, 8]).class_names == ["3", "8"]  # labels 0, 1 are digits 3, 8


@pytest.mark.slow
def test_cifar10_names_come_from_its_meta_file(data_dir) -> None:
    import pickle

    from lit_otclust.data import CIFAR10DataModule

    with open(data_dir / "cifar-10-batches-py" / "batches.meta", "rb") as fh:  # the data set's own list
        meta = pickle.load(fh)["label_names"]
    module = CIFAR10DataModule(str(data_dir), download=False, fit_split="test", classes=[3, 5], batch_size=10)
    module.setup()
    assert module.class_names == [meta[3], meta[5]] == ["cat", "dog"]


def test_the_cli_stops_on_unreadable_files_with_the_message_before_any_logger(damaged, tmp_path) -> None:
    from lit_otclust.cli import main

    root, _, bad = damaged
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", FOLDER_CONFIG, "--data.data_dir", str(root), "--trainer.default_root_dir", str(out)])
    # A message, not an exception: Python prints it alone, without a traceback, and exits with status 1.
    assert isinstance(stop.value.code, str) and stop.value.__cause__ is None
    assert stop.value.code.startswith("python -m lit_otclust: error: 4 of 14 image files")
    assert all(str(path) in stop.value.code for path in bad)
    assert not out.exists()  # no W&B run, CSV log, checkpoint or config was created
