"""Data modules against the real files in ../shared/data (skipped, with the reason, when absent)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import DistributedSampler
from torchvision.transforms.functional import pil_to_tensor

from lit_otclust.data import (ArrayDataModule, CIFAR10DataModule, ImageFolderDataModule, InMemoryDataset,
                              MNISTDataModule, stratified_indices)
from lit_otclust.data.loading import _gather_on_device

# Official class counts (LeCun's and Krizhevsky's pages), independent of torchvision.
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(scope="module")
def mnist_all(data_dir: Path) -> MNISTDataModule:
    module = MNISTDataModule(str(data_dir), download=False, fit_split="all")
    module.setup("fit")
    return module


@pytest.fixture(scope="module")
def cifar_train(data_dir: Path) -> CIFAR10DataModule:
    module = CIFAR10DataModule(str(data_dir), download=False, fit_split="train")
    module.setup("fit")
    return module


@pytest.mark.slow
def test_mnist_shapes_counts_and_pixels(mnist_all: MNISTDataModule, data_dir: Path) -> None:
    fit, heldout = mnist_all.fit_set, mnist_all.heldout_set
    assert fit.x.shape == (70_000, 784) and fit.x.dtype == torch.float32
    assert fit.y.shape == (70_000,) and fit.y.dtype == torch.int64
    assert heldout.x.shape == (10_000, 784) and mnist_all.input_shape == (784,) and mnist_all.num_classes == 10
    assert torch.bincount(fit.y[:60_000]).tolist() == MNIST_TRAIN_COUNTS
    assert torch.bincount(heldout.y).tolist() == MNIST_TEST_COUNTS
    # "all" puts the test split last, so the held-out loader is inside the fitted set.
    assert torch.equal(heldout.x, fit.x[60_000:])
    # Second code path: torchvision's per-sample PIL image.
    reference = torchvision.datasets.MNIST(data_dir, train=False, download=False)
    for i in (0, 1234, 9999):
        image, label = reference[i]
        assert torch.equal(heldout.x[i], pil_to_tensor(image).flatten().float() / 255) and heldout.y[i] == label
    assert 0.0 <= float(fit.x.min()) and float(fit.x.max()) <= 1.0


@pytest.mark.slow
def test_cifar_shapes_counts_and_pixels(cifar_train: CIFAR10DataModule, data_dir: Path) -> None:
    fit, heldout = cifar_train.fit_set, cifar_train.heldout_set
    assert fit.x.shape == (50_000, 3, 32, 32) and fit.x.dtype == torch.float32 and fit.y.dtype == torch.int64
    assert heldout.x.shape == (10_000, 3, 32, 32) and cifar_train.input_shape == (3, 32, 32)
    assert torch.bincount(fit.y).tolist() == [5000] * 10
    assert torch.bincount(heldout.y).tolist() == [1000] * 10
    reference = torchvision.datasets.CIFAR10(data_dir, train=True, download=False)
    for i in (0, 31_337, 49_999):  # checks the HWC -> CHW layout against PIL's
        image, label = reference[i]
        assert torch.equal(fit.x[i], pil_to_tensor(image).float() / 255) and fit.y[i] == label


@pytest.mark.slow
def test_unit_scaling_matches_official_statistics(mnist_all: MNISTDataModule, cifar_train: CIFAR10DataModule) -> None:
    # Statistics of the training split recomputed from the files, against the published values
    # that "standard" scaling uses.
    train = mnist_all.fit_set.x[:60_000].double()
    assert float(train.mean()) == pytest.approx(0.1307, abs=1e-4)
    assert float(train.std()) == pytest.approx(0.3081, abs=1e-4)
    x = cifar_train.fit_set.x.double()
    torch.testing.assert_close(x.mean(dim=(0, 2, 3)), torch.tensor(CIFAR10DataModule.mean, dtype=torch.double), atol=1e-4, rtol=0)
    torch.testing.assert_close(x.std(dim=(0, 2, 3)), torch.tensor(CIFAR10DataModule.std, dtype=torch.double), atol=1e-4, rtol=0)


@pytest.mark.slow
def test_standard_scaling_whitens_training_split(data_dir: Path) -> None:
    module = MNISTDataModule(str(data_dir), download=False, fit_split="train", scaling="standard")
    module.setup()
    x = module.fit_set.x.double()
    assert abs(float(x.mean())) < 1e-3 and float(x.std()) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.slow
def test_standard_scaling_is_per_channel_affine_map_of_unit(data_dir: Path) -> None:
    kwargs = dict(data_dir=str(data_dir), download=False, subset=500, seed=3, fit_split="test")
    unit, standard = CIFAR10DataModule(**kwargs), CIFAR10DataModule(scaling="standard", **kwargs)
    unit.setup()
    standard.setup()
    mean = torch.tensor(CIFAR10DataModule.mean).view(3, 1, 1)
    std = torch.tensor(CIFAR10DataModule.std).view(3, 1, 1)
    torch.testing.assert_close(standard.fit_set.x, (unit.fit_set.x - mean) / std)


@pytest.mark.slow
def test_subset_is_stratified_and_reproducible(data_dir: Path) -> None:
    def build(seed: int) -> MNISTDataModule:
        module = MNISTDataModule(str(data_dir), download=False, subset=2005, seed=seed)
        module.setup()
        return module

    first, again, other = build(0), build(0), build(1)
    counts = torch.bincount(first.fit_set.y, minlength=10)
    assert counts.sum() == 2005 and counts.max() - counts.min() <= 1
    assert torch.equal(first.fit_set.x, again.fit_set.x) and torch.equal(first.heldout_set.y, again.heldout_set.y)
    assert not torch.equal(first.fit_set.x, other.fit_set.x)
    heldout_counts = torch.bincount(first.heldout_set.y, minlength=10)
    assert heldout_counts.sum() == 2005 and heldout_counts.max() - heldout_counts.min() <= 1


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=2, max_size=8), fraction=st.floats(0.01, 1.0), seed=st.integers(0, 2**31))
def test_stratified_indices_balances_as_far_as_classes_allow(counts: list[int], fraction: float, seed: int) -> None:
    labels = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    if len(labels) == 0:
        return
    size = max(1, round(fraction * len(labels)))
    chosen = stratified_indices(labels, size, seed)
    assert len(chosen) == size and len(torch.unique(chosen)) == size and torch.equal(chosen, chosen.sort().values)
    taken = torch.bincount(labels[chosen], minlength=len(counts))
    available = torch.tensor(counts)
    short = taken < available  # classes that still had samples left
    if short.any():
        # Classes not exhausted differ by at most one, and none gets fewer than an exhausted one.
        assert taken[short].max() - taken[short].min() <= 1
        assert (taken[~short] <= taken[short].min() + 1).all()
    assert torch.equal(stratified_indices(labels, size, seed), chosen)


@pytest.mark.slow
def test_loaders_yield_index_tuples(data_dir: Path) -> None:
    module = MNISTDataModule(str(data_dir), download=False, subset=1000, batch_size=300, eval_batch_size=256)
    module.setup("fit")
    fit_x = module.fit_set.x
    module.setup("validate")  # a second call keeps the tensors it built
    assert module.fit_set.x is fit_x
    train_batches = list(module.train_dataloader())
    assert [len(b[0]) for b in train_batches] == [300, 300, 300]  # drop_last: every OT batch is full
    seen = torch.cat([index for _, _, index in train_batches])
    assert len(torch.unique(seen)) == 900 and not torch.equal(seen, seen.sort().values)  # shuffled, no repeats
    # A new order every epoch, the same one again for the same (seed, epoch): what resuming relies on.
    sampler = module.train_dataloader().sampler
    orders = {}
    for epoch in (0, 1, 0):
        sampler.set_epoch(epoch)
        orders.setdefault(epoch, []).append(list(sampler))
    assert orders[0][0] == orders[0][1] and orders[0][0] != orders[1][0]
    assert seen.tolist() == orders[0][0][:900]
    for x, y, index in train_batches:
        assert x.dtype == torch.float32 and y.dtype == torch.int64 and index.dtype == torch.int64
        assert torch.equal(x, module.fit_set.x[index]) and torch.equal(y, module.fit_set.y[index])
    fitted_loader, heldout_loader = module.val_dataloader()
    for loader, dataset in ((fitted_loader, module.fit_set), (heldout_loader, module.heldout_set)):
        x, y, index = (torch.cat(parts) for parts in zip(*loader))
        assert torch.equal(index, torch.arange(len(dataset))) and torch.equal(x, dataset.x) and torch.equal(y, dataset.y)
    assert torch.equal(torch.cat([b[2] for b in module.test_dataloader()]), torch.arange(len(module.heldout_set)))
    assert torch.equal(torch.cat([b[0] for b in module.predict_dataloader()]), module.fit_set.x)


@pytest.mark.slow
def test_lightning_distributed_sampler_injection_keeps_batches(data_dir: Path) -> None:
    # Lightning's DDP path rebuilds the train loader with a DistributedSampler via _update_dataloader;
    # run that same function for both ranks of a world of 2, without processes.
    module = MNISTDataModule(str(data_dir), download=False, subset=1200, batch_size=300)
    module.setup()
    loader = module.train_dataloader()
    seen = []
    for rank in range(2):
        sampler = DistributedSampler(loader.dataset, num_replicas=2, rank=rank, shuffle=True, seed=0)
        rebuilt = _update_dataloader(loader, sampler, mode=RunningStage.TRAINING)
        batches = list(rebuilt)
        assert [len(x) for x, _, _ in batches] == [300, 300]
        for x, _, index in batches:
            assert torch.equal(x, module.fit_set.x[index])
        seen.append(torch.cat([index for _, _, index in batches]))
    assert len(torch.unique(torch.cat(seen))) == 1200


@pytest.mark.slow
def test_on_device_serves_the_same_batches_and_moves_the_tensors_once(data_dir: Path) -> None:
    settings = dict(download=False, subset=600, batch_size=100, eval_batch_size=256, seed=3)
    plain = MNISTDataModule(str(data_dir), **settings)
    on = MNISTDataModule(str(data_dir), on_device=True, **settings)
    assert on.on_device and on.hparams["on_device"] is True and plain.hparams["on_device"] is False
    plain.setup("fit")
    on.setup("fit")
    # No trainer: the tensors stay where they are.
    fit_x = on.fit_set.x
    on.train_dataloader()
    assert on.fit_set.x is fit_x
    # A real CPU Trainer: its root device is where the tensors already are, so nothing is copied.
    on.trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                           enable_progress_bar=False, enable_model_summary=False)
    assert on.trainer.strategy.root_device == torch.device("cpu")
    loaders = [(plain.train_dataloader(), on.train_dataloader())] + list(zip(plain.val_dataloader(), on.val_dataloader()))
    assert on.fit_set.x is fit_x
    for plain_loader, on_loader in loaders:
        for (x0, y0, i0), (x1, y1, i1) in zip(plain_loader, on_loader, strict=True):
            assert torch.equal(x0, x1) and torch.equal(y0, y1) and torch.equal(i0, i1)
            numpy_index = i1.numpy()  # the same rows gathered independently, from the dataset's own arrays
            dataset = on_loader.dataset
            assert torch.equal(x1, torch.from_numpy(dataset.x.numpy()[numpy_index]))
            assert torch.equal(y1, torch.from_numpy(dataset.y.numpy()[numpy_index]))
    # Another device (meta: shapes without data, as no GPU is at hand): each loader moves its set there
    # once, and batches are then gathered by torch on that device.
    on.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("meta")))
    x, y, index = next(iter(on.train_dataloader()))
    assert on.fit_set.x.device.type == "meta" and on.fit_set.y.device.type == "meta"
    assert x.device.type == y.device.type == index.device.type == "meta"
    assert x.shape == (100, 784) and y.shape == (100,) and index.shape == (100,) and index.dtype == torch.int64
    moved = on.fit_set.x
    on.predict_dataloader()
    assert on.fit_set.x is moved  # not moved a second time
    assert on.heldout_set.x.device.type == "cpu"  # the held-out set moves when its loader is built
    on.test_dataloader()
    assert on.heldout_set.x.device.type == "meta"


@pytest.mark.parametrize("shape", [(50, 784), (50, 3, 4, 4)])
def test_gather_on_device_equals_the_numpy_gather(shape: tuple[int, ...]) -> None:
    generator = torch.Generator().manual_seed(0)
    dataset = InMemoryDataset(torch.rand(shape, generator=generator), torch.randint(0, 10, (shape[0],), generator=generator))
    # Any order, repeats allowed; a run of consecutive samples (an evaluation batch) comes back as views.
    for indices in ([7, 0, 49, 7, 23], [10, 11, 12, 13], [48, 49], [3], [5, 6, 8], [9, 8, 7]):
        host = dataset.__getitems__(indices)  # CPU tensors: numpy's gather, or views
        device = _gather_on_device(dataset.x, dataset.y, indices)
        for a, b in zip(host, device, strict=True):
            assert torch.equal(a, b) and a.dtype == b.dtype and a.device == b.device and a.shape == b.shape
        assert torch.equal(device[2], torch.tensor(indices)) and torch.equal(device[0], dataset.x[torch.tensor(indices)])
        consecutive = all(j == i + 1 for i, j in zip(indices, indices[1:]))
        assert (host[0].data_ptr() == dataset.x[indices[0]].data_ptr()) == consecutive  # a view exactly then


def _evaluate_under_ddp(rank: int, world_size: int, init_file: str, data_dir: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        module = MNISTDataModule(data_dir, download=False, subset=1001, eval_batch_size=100)
        module.setup()
        loaders = module.val_dataloader() + [module.test_dataloader(), module.predict_dataloader()]
        assert all(isinstance(loader.sampler, UnrepeatedDistributedSampler) for loader in loaders)
        for k, loader in enumerate(loaders):
            index = torch.cat([index for _, _, index in loader])
            np.save(os.path.join(out_dir, f"rank{rank}_loader{k}.npy"), index.numpy())
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.distributed
def test_eval_loaders_count_each_sample_once_under_ddp(data_dir: Path, tmp_path: Path) -> None:
    # 1001 samples over 2 ranks: DistributedSampler would pad one repeat; ours must not.
    # spawn, not fork: a child forked after the parent used torch's OpenMP pool can deadlock.
    mp.spawn(_evaluate_under_ddp, args=(2, str(tmp_path / "init"), str(data_dir), str(tmp_path)), nprocs=2, join=True)
    for k, size in enumerate([1001, 1001, 1001, 1001]):
        parts = [np.load(tmp_path / f"rank{rank}_loader{k}.npy") for rank in range(2)]
        assert sorted(np.concatenate(parts).tolist()) == list(range(size))


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(fit_split="validation"), "fit_split='validation' is unknown"),
        (dict(scaling="zscore"), "scaling='zscore' is unknown"),
        (dict(subset=0), r"subset=0 must lie in \[1, 70000\]"),
        (dict(subset=70_001), r"subset=70001 must lie in \[1, 70000\]"),
        (dict(subset=60_001, fit_split="train"), r"subset=60001 must lie in \[1, 60000\]"),
        (dict(batch_size=0), "batch_size=0 must be at least 1"),
        (dict(eval_batch_size=0), "eval_batch_size=0 must be at least 1"),
        (dict(subset=100, batch_size=300), "batch_size=300 exceeds the 100 fitted samples"),
        (dict(on_device=True, num_workers=1), "on_device=True needs num_workers=0, got num_workers=1"),
    ],
)
def test_bad_settings_raise_clear_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MNISTDataModule(download=False, **kwargs)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: CIFAR10DataModule(download=False, **kw),
        lambda **kw: ImageFolderDataModule("no-such-folder", **kw),
        lambda **kw: ArrayDataModule("no-such-file.npy", **kw),
    ],
    ids=["cifar10", "image_folder", "array"],
)
def test_every_data_module_takes_on_device(make) -> None:
    # The argument reaches the shared base class (which checks it before any file is looked at).
    with pytest.raises(ValueError, match="on_device=True needs num_workers=0, got num_workers=2"):
        make(on_device=True, num_workers=2)


LOADER_SETTINGS = {"batch_size": 7, "eval_batch_size": 11, "subset": 20, "class_proportions": None, "seed": 3,
                   "scaling": "standard", "drop_last": False, "num_workers": 0, "on_device": True}


@pytest.mark.parametrize("class_path", ["lit_otclust.data.MNISTDataModule", "lit_otclust.data.CIFAR10DataModule",
                                        "lit_otclust.data.ImageFolderDataModule", "lit_otclust.data.ArrayDataModule"])
def test_every_data_module_takes_the_loader_settings_under_the_same_flat_keys(class_path: str, tmp_path: Path) -> None:
    """The nine settings are stated once (InMemoryDataModule) and forwarded by each module's ``**loader``: the CLI
    still finds every one under ``data.init_args.<name>`` and the instance holds the value given."""
    from jsonargparse import ArgumentParser

    x = np.random.default_rng(0).integers(0, 256, (40, 8, 8), dtype=np.uint8)
    for i in range(2):  # a folder of two classes, and the same images as an array file with labels
        (tmp_path / f"c{i}").mkdir()
        for j in range(20):
            Image.fromarray(x[20 * i + j]).save(tmp_path / f"c{i}" / f"{j}.png")
    np.savez(tmp_path / "xy.npz", x=x, y=np.repeat([0, 1], 20))
    first = {"lit_otclust.data.MNISTDataModule": ["--data.init_args.download=false"],
             "lit_otclust.data.CIFAR10DataModule": ["--data.init_args.download=false"],
             "lit_otclust.data.ImageFolderDataModule": [f"--data.init_args.data_dir={tmp_path}"],
             "lit_otclust.data.ArrayDataModule": [f"--data.init_args.path={tmp_path / 'xy.npz'}"]}[class_path]
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(L.LightningDataModule, "data")
    given = [f"--data.init_args.{key}={'null' if value is None else str(value).lower()}"
             for key, value in LOADER_SETTINGS.items()]
    config = parser.parse_args(["--data", class_path, *first, *given])
    assert {key: config.data.init_args[key] for key in LOADER_SETTINGS} == LOADER_SETTINGS
    module = parser.instantiate(config).data
    assert {key: getattr(module, key) for key in LOADER_SETTINGS} == LOADER_SETTINGS
    assert {key: module.hparams[key] for key in LOADER_SETTINGS} == LOADER_SETTINGS  # the checkpoint's record


def test_cifar_subset_bound_is_its_own() -> None:
    with pytest.raises(ValueError, match=r"subset=60001 must lie in \[1, 60000\]"):
        CIFAR10DataModule(download=False, subset=60_001)


@pytest.mark.parametrize(
    ("module_class", "expected"),
    [(MNISTDataModule, "MNIST/raw/train-images-idx3-ubyte"), (CIFAR10DataModule, "cifar-10-batches-py/data_batch_1")],
)
def test_missing_files_name_folder_files_and_remedy(module_class, expected: str, tmp_path: Path) -> None:
    module = module_class(str(tmp_path), download=False)
    module.prepare_data()  # download=False: must not touch the network or the folder
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError) as error:
        module.setup()
    text = str(error.value)
    assert str(tmp_path / module_class.folder) in text and expected in text
    assert "set data_dir" in text.lower() and "download=True" in text


def test_a_failed_download_names_data_dir_and_the_remedy(tmp_path: Path, monkeypatch) -> None:
    """A real download attempt that fails (its mirror a closed local port, so the same with or without internet)
    ends in our error, which names data_dir, the files it needs and the command-line settings, not torchvision's
    bare "Error downloading" alone (which this machine's users met with no network and no --data.data_dir)."""
    monkeypatch.setattr(torchvision.datasets.MNIST, "mirrors", ["http://127.0.0.1:9/"])
    with pytest.raises(RuntimeError) as error:
        MNISTDataModule(str(tmp_path)).prepare_data()
    text = str(error.value)
    assert f"could not download MNIST into data_dir {tmp_path}" in text and "Error downloading" in text
    assert "MNIST/raw/train-images-idx3-ubyte" in text and "--data.data_dir" in text and "--data.download false" in text


@pytest.mark.slow
def test_prepare_data_with_files_present_needs_no_network(data_dir: Path) -> None:
    # download=True (the default) must not try the network when the files are already there: it neither
    # fails (there is no network here) nor writes anything into the folder.
    before = {p: p.stat().st_mtime_ns for p in (data_dir / "MNIST").rglob("*")}
    MNISTDataModule(str(data_dir)).prepare_data()
    assert {p: p.stat().st_mtime_ns for p in (data_dir / "MNIST").rglob("*")} == before


@pytest.mark.slow
@pytest.mark.parametrize("module_class", [MNISTDataModule, CIFAR10DataModule])
def test_prepare_data_with_files_present_reads_no_image(module_class, data_dir: Path, monkeypatch) -> None:
    # Files present: torchvision's constructor (which reads every image, and setup() reads them again) is not
    # called at all; setup() still reads the real files through it.
    module = module_class(str(data_dir))
    real = module._torchvision_dataset
    monkeypatch.setattr(module, "_torchvision_dataset", lambda *a, **k: pytest.fail("prepare_data read the images"))
    module.prepare_data()
    monkeypatch.setattr(module, "_torchvision_dataset", real)
    module.setup("fit")
    assert len(module.fit_set) == sum(module.split_sizes.values())


@pytest.mark.slow
def test_a_corrupt_cifar10_batch_is_fetched_again(data_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """download=True and a CIFAR-10 batch that fails its md5: prepare_data asks torchvision to fetch the archive
    again, as torchvision's own download() would (here its URL is a closed local port, so the attempt fails into
    our error naming data_dir), instead of taking the files' presence for a download."""
    folder = tmp_path / CIFAR10DataModule.folder
    folder.mkdir(parents=True)
    for name in CIFAR10DataModule.files:
        (folder / name).symlink_to(data_dir / CIFAR10DataModule.folder / name)
    (folder / "data_batch_3").unlink()
    (folder / "data_batch_3").write_bytes((data_dir / CIFAR10DataModule.folder / "data_batch_3").read_bytes()[:1000])
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "url", "http://127.0.0.1:9/cifar-10-python.tar.gz")
    with pytest.raises(RuntimeError, match=f"could not download CIFAR-10 into data_dir {tmp_path}"):
        CIFAR10DataModule(str(tmp_path)).prepare_data()


@pytest.mark.slow
def test_a_truncated_file_is_named(data_dir: Path, tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in MNISTDataModule.files:
        (raw / name).symlink_to(data_dir / "MNIST" / "raw" / name)
    (raw / "train-images-idx3-ubyte").unlink()
    (raw / "train-images-idx3-ubyte").write_bytes((data_dir / "MNIST" / "raw" / "train-images-idx3-ubyte").read_bytes()[:1000])
    dm = MNISTDataModule(data_dir=str(tmp_path), download=False, fit_split="train")
    with pytest.raises(RuntimeError, match="train-images-idx3-ubyte.*corrupted or truncated"):
        dm.setup("fit")
