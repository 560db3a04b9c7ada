"""MNIST and CIFAR-10 as data modules, read from torchvision's on-disk layout and decoded once.

Which samples are clustered (``fit_split``): the paper does not say which images Table 1 is computed on; DEC
and DKM, which it compares with, cluster all of them, so the configs use ``fit_split="all"``.

- ``"train"``: the official training split (60k / 50k); the test split is truly held out.
- ``"test"``: the official test split (10k / 10k), handy for quick runs.
- ``"all"``: train followed by test (70k / 60k).

The held-out loader always serves the official test split: under ``"all"`` and ``"test"`` it is *inside* the fitted
samples, so only ``"train"`` gives a genuine out-of-sample accuracy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import Tensor
from torchvision.datasets.utils import check_integrity

from lit_otclust.data.base import InMemoryDataModule, standardize
from lit_otclust.data.loading import InMemoryDataset

FIT_SPLITS = ("train", "test", "all")


class TorchvisionDataModule(InMemoryDataModule):
    """One torchvision image data set served from memory; subclasses name the files.

    Args:
        data_dir: the folder holding the data set in torchvision's layout (``MNIST/raw/...``, ``cifar-10-batches-py``).
        download: let ``prepare_data`` download missing files (needs internet).
        fit_split: "train", "test" or "all": which samples are clustered (see the module docstring).
        classes: keep only these classes (e.g. ``[3, 8]``: two digits), relabelled 0, 1, ... in the order given;
            ``num_classes`` becomes their number, and ``class_proportions[i]`` applies to ``classes[i]``.
        **loader: the loader settings of :class:`~lit_otclust.data.base.InMemoryDataModule`. ``subset`` and
            ``class_proportions`` also cut the held-out test split, the same way; "standard" ``scaling`` uses the
            official training split's ``mean`` and ``std`` per channel.

    Raises:
        ValueError: unknown fit_split; classes with repeats, fewer than 2, or outside [0, 10); a loader setting the
            base class refuses; (in ``setup``) class_proportions asking a class for more samples than it has.
        FileNotFoundError: in ``setup``, when files are missing (names the folder and the files).
    """

    name: str
    num_classes: int = 10
    input_shape: tuple[int, ...]
    split_sizes: dict[str, int]  # samples in the official train and test splits
    folder: str  # relative to data_dir
    files: tuple[str, ...]  # expected inside folder
    mean: tuple[float, ...]  # per channel, of the training split, pixels in [0, 1]
    std: tuple[float, ...]

    def __init__(
        self,
        data_dir: str = "data",
        download: bool = True,
        fit_split: str = "all",
        classes: list[int] | None = None,
        **loader: Any,
    ) -> None:
        if classes is not None:
            if len(set(classes)) != len(classes) or len(classes) < 2 or not all(0 <= c < self.num_classes for c in classes):
                raise ValueError(f"classes={list(classes)} must be at least 2 distinct classes of [0, {self.num_classes})")
            self.num_classes = len(classes)  # before the base class checks class_proportions against it
        self.classes = None if classes is None else [int(c) for c in classes]
        if fit_split not in FIT_SPLITS:
            raise ValueError(f"fit_split={fit_split!r} is unknown; choose one of {FIT_SPLITS}")
        super().__init__(**loader)
        sizes = self.split_sizes
        self._check_subset(sizes["train"] + sizes["test"] if fit_split == "all" else sizes[fit_split],
                           f"the {self.name} samples in fit_split={fit_split!r}")
        self.data_dir = Path(data_dir)
        self.download = download
        self.fit_split = fit_split

    # --- reading -------------------------------------------------------------------------------

    def _read_split(self, train: bool) -> tuple[Tensor, Tensor]:
        """Return uint8 images (N, *input_shape) and int64 labels (N,) of one official split."""
        raise NotImplementedError

    def _torchvision_dataset(self, train: bool, download: bool):
        raise NotImplementedError

    def _expected_paths(self) -> str:
        """The files a data_dir must hold, relative to it, for the error messages."""
        return ", ".join(f"{self.folder}/{name}" for name in self.files)

    def _downloaded(self) -> bool:
        """Whether ``prepare_data`` has nothing to download: torchvision's own test (MNIST: the files exist)."""
        return all((self.data_dir / self.folder / name).is_file() for name in self.files)

    def _check_files(self) -> None:
        folder = self.data_dir / self.folder
        missing = [name for name in self.files if not (folder / name).is_file()]
        if missing:
            how = "call prepare_data() first (the Trainer does) to download them" if self.download else "or set download=True (needs internet)"
            raise FileNotFoundError(
                f"{self.name} files not found in {folder}: missing {', '.join(missing)}. "
                f"Expected {self._expected_paths()} under data_dir. "
                f"Set data_dir (--data.data_dir) to the folder that holds {self.folder.split('/')[0]}/, {how}."
            )

    def prepare_data(self) -> None:
        """Download the files (Lightning runs this on one process per node only)."""
        if not self.download or self._downloaded():
            # Files present: torchvision's constructor would read every image here for setup() to read again.
            return
        for train in (True, False):
            try:
                self._torchvision_dataset(train, download=True)  # a no-op when the files are already there
            # torchvision turns a failed download (no internet: URLError) into a RuntimeError of its own.
            except (OSError, RuntimeError) as error:
                raise RuntimeError(
                    f"could not download {self.name} into data_dir {self.data_dir}: {error}. Without internet, set "
                    f"data_dir to a folder that holds {self._expected_paths()} "
                    f"(on the command line --data.data_dir), or put the files "
                    f"there; download=False (--data.download false) then never tries the network."
                ) from error

    def setup(self, stage: str | None = None) -> None:
        """Build the fitted and held-out tensors, once for every stage."""
        if self.fit_set is not None:
            return
        self._check_files()
        test_x, test_y = self._keep_classes(*self._read_split(train=False))
        if self.fit_split == "test":
            fit_x, fit_y = test_x, test_y
        else:
            train_x, train_y = self._keep_classes(*self._read_split(train=True))
            fit_x, fit_y = (train_x, train_y) if self.fit_split == "train" else (torch.cat([train_x, test_x]), torch.cat([train_y, test_y]))
        if self.classes is not None:
            self._check_fit_size(len(fit_y))
        if self.subset is not None or self.class_proportions is not None:
            fit_keep, test_keep = self._fit_indices(fit_y), self._heldout_indices(test_y)
            self._check_fit_size(len(fit_keep))
            # Convert only the kept uint8 rows: a small subset never builds the full float tensor.
            self.fit_set = InMemoryDataset(self._to_float(fit_x[fit_keep]), fit_y[fit_keep])
            self.heldout_set = InMemoryDataset(self._to_float(test_x[test_keep]), test_y[test_keep])
        elif self.fit_split == "train":
            self.fit_set = InMemoryDataset(self._to_float(fit_x), fit_y)
            self.heldout_set = InMemoryDataset(self._to_float(test_x), test_y)
        else:
            # The test split is the tail of the fitted tensor: a view, not a second conversion.
            self.fit_set = InMemoryDataset(self._to_float(fit_x), fit_y)
            start = len(fit_y) - len(test_y)
            self.heldout_set = InMemoryDataset(self.fit_set.x[start:], self.fit_set.y[start:])
            self.heldout_offset = start

    def _keep_classes(self, images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """The samples of ``classes`` only, relabelled by their position in ``classes`` (all if None)."""
        if self.classes is None:
            return images, labels
        relabel = torch.full((max(int(labels.max()), *self.classes) + 1,), -1, dtype=torch.int64)  # old -> new label; -1: dropped
        relabel[self.classes] = torch.arange(len(self.classes))
        new = relabel[labels]  # (N,)
        keep = new >= 0
        return images[keep], new[keep]

    def _to_float(self, images: Tensor) -> Tensor:
        """Map uint8 pixels (N, *input_shape) to float32 per ``scaling``."""
        x = images.to(torch.float32).div_(255.0)
        if self.scaling == "standard":
            # Channel statistics of the official training split (also for fit_split "test"/"all").
            standardize(x, self.mean, self.std)
        return x


class MNISTDataModule(TorchvisionDataModule):
    """MNIST digits (60,000 train, 10,000 test), flattened to 784 values in [0, 1] for the paper's MLP encoder. The
    arguments are those of :class:`TorchvisionDataModule`."""

    name = "MNIST"
    input_shape = (784,)
    default_eval_batch_size = 2_000  # the MLP's fastest (see InMemoryDataModule)
    split_sizes = {"train": 60_000, "test": 10_000}
    folder = "MNIST/raw"
    files = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    mean = (0.1307,)
    std = (0.3081,)

    def _torchvision_dataset(self, train: bool, download: bool) -> torchvision.datasets.MNIST:
        return torchvision.datasets.MNIST(self.data_dir, train=train, download=download)

    def _read_split(self, train: bool) -> tuple[Tensor, Tensor]:
        names = self.files[:2] if train else self.files[2:]
        try:
            dataset = self._torchvision_dataset(train, download=False)
        except (RuntimeError, ValueError) as error:  # a truncated or foreign file fails torchvision's parser
            raise RuntimeError(f"MNIST files {' / '.join(names)} in {self.data_dir / self.folder} are corrupted "
                               f"or truncated ({error}); replace them with the originals") from error
        return dataset.data.reshape(len(dataset.data), -1), dataset.targets.to(torch.int64)  # (N, 784), (N,)


class CIFAR10DataModule(TorchvisionDataModule):
    """CIFAR-10 images (50,000 train, 10,000 test) kept as 3x32x32 for the paper's convolutional encoder. The
    arguments are those of :class:`TorchvisionDataModule`."""

    name = "CIFAR-10"
    input_shape = (3, 32, 32)
    split_sizes = {"train": 50_000, "test": 10_000}
    folder = "cifar-10-batches-py"
    files = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta")
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)

    def _torchvision_dataset(self, train: bool, download: bool) -> torchvision.datasets.CIFAR10:
        return torchvision.datasets.CIFAR10(self.data_dir, train=train, download=download)

    def _downloaded(self) -> bool:
        # torchvision's test for CIFAR-10 (CIFAR10.download): the batches' md5s, so a corrupt file is fetched again.
        folder, cifar = self.data_dir / self.folder, torchvision.datasets.CIFAR10
        return super()._downloaded() and all(check_integrity(str(folder / name), md5)
                                             for name, md5 in cifar.train_list + cifar.test_list)

    @property
    def class_names(self) -> list[str] | None:
        """The names in ``batches.meta`` (``airplane``, ...; read in ``setup``), of the kept ``classes`` if given."""
        names = getattr(self, "_names", None)
        if names is None:
            return super().class_names
        return names if self.classes is None else [names[c] for c in self.classes]

    def _read_split(self, train: bool) -> tuple[Tensor, Tensor]:
        try:
            dataset = self._torchvision_dataset(train, download=False)
        except RuntimeError as error:  # the files exist (checked before) but fail torchvision's md5
            raise RuntimeError(f"CIFAR-10 files in {self.data_dir / self.folder} are corrupted: {error}") from error
        self._names = list(dataset.classes)  # torchvision read them from batches.meta
        images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()  # (N, 32, 32, 3) -> (N, 3, 32, 32)
        return images, torch.as_tensor(dataset.targets, dtype=torch.int64)
