"""A user's own images: image folders and array files, through the data modules and the CLI.

Real files only: PNGs of MNIST test digits written on the fly (some of another size), arrays
saved with numpy/torch, and ``python -m lit_otclust fit`` then ``predict`` as subprocesses.
"""

from __future__ import annotations

import csv
import io
import logging
import os
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
    module = ImageFolderDataModule(str(tmp_path / "classes"), batch_size=1)  # the first image is fine
    with pytest.raises(ValueError, match="cannot read image") as error:
        module.setup()
    assert str(bad) in str(error.value)
    with pytest.raises(ValueError, match="num_classes"):
        ImageFolderDataModule(str(folders["flat"][0]), labelled=False)
    with pytest.raises(ValueError, match="num_classes=5 but"):
        ImageFolderDataModule(str(folders["labelled"][0]), num_classes=5)

    np.save(tmp_path / "flat.npy", np.zeros((10, 784), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"rank 2") as error:
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
    from lit_otclust.callbacks import PhaseSwitch
    from lit_otclust.models import MLPAutoencoder
    from lit_otclust.system import DeepClustering

    w = [0.6, 0.3, 0.1]

    def fit(proportions: list[float] | None) -> list[str]:
        data = ImageFolderDataModule(str(folders["labelled"][0]), grayscale=True, batch_size=4, class_proportions=w)
        model = DeepClustering(MLPAutoencoder(data.input_shape, hidden_dims=(8,), latent_dim=2), num_clusters=3,
                               proportions=proportions)
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
