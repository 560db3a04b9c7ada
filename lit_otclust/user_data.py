"""Cluster your own images: a folder of image files or an array file as a LightningDataModule.

Both modules keep the contract of :mod:`lit_otclust.data`: the images are decoded once, in
``setup``, into float32 tensors (``fit_set``, the images clustered, and ``heldout_set``, the
optional held-out images, both :class:`~lit_otclust.data.InMemoryDataset`), every loader yields
``(x, y, index)``, the training order depends only on the seed and the epoch (so a run resumes
mid-epoch), and ``subset`` / ``class_proportions`` draw seeded subsamples.

``num_classes`` and ``input_shape`` are set in ``__init__`` from a cheap look at the data (the
folder listing and the first image's header, or the array file's header and its labels), so
LightningCLI links them to the model (``model.num_clusters`` and the autoencoder's
``input_shape``) before anything is decoded.

Labels. With labels (class sub-folders, or a label array) the Hungarian accuracy, NMI and ARI are
logged as for MNIST. Without them every sample's label is -1: training, ``validate`` and
``predict`` work as usual, the label-based metrics are skipped (the cluster-size logs remain), and
``num_classes`` must be given: it is the number of clusters to find.

Images of unequal size (folders). Every image is resized to ``image_size`` (H, W), by default
the size of the first image in sorted path order, with
``torchvision.transforms.v2.functional.resize(..., antialias=True)``: bilinear, the aspect ratio
not kept. Crop your images beforehand if stretching them would matter.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image
from torch import Tensor
from torchvision.transforms.v2.functional import pil_to_tensor, resize

from lit_otclust.data import InMemoryDataset, _InMemoryDataModule, _standardize, check_class_proportions

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
ARRAY_EXTENSIONS = (".npy", ".npz", ".pt", ".pth")
NO_LABEL = -1


class _UserDataModule(_InMemoryDataModule):
    """What the folder and array modules share: the number of classes, and the float conversion.

    ``scaling="unit"`` maps uint8 pixels to [0, 1] (/ 255) and keeps float images as they are;
    ``"standard"`` then subtracts the per-channel mean and divides by the per-channel standard
    deviation of the fitted images (after ``subset`` / ``class_proportions``), and applies the
    same statistics to the held-out images. They are kept as ``mean`` and ``std``.
    """

    _no_heldout_hint = ": give it held-out images"

    def _resolve_num_classes(self, num_classes: int | None, classes: Sequence | None, where: str) -> int:
        """The number of clusters: the classes found in the labels, or the user's ``num_classes`` without labels."""
        if classes is None:
            if num_classes is None:
                raise ValueError(f"{where} has no labels: set num_classes to the number of clusters to find")
            if num_classes < 2:
                raise ValueError(f"num_classes={num_classes} must be at least 2 (it is the number of clusters)")
            if self.class_proportions is not None:
                raise ValueError(f"class_proportions draws per class and needs labels; {where} has none")
            return num_classes
        if len(classes) < 2:
            raise ValueError(f"{where} has {len(classes)} class ({list(classes)}); clustering needs at least 2")
        if num_classes is not None and num_classes != len(classes):
            raise ValueError(f"num_classes={num_classes} but {where} has {len(classes)} classes ({_preview(classes)}); "
                             f"leave num_classes unset to use them, or drop the labels to choose the number of clusters")
        if self.class_proportions is not None:
            check_class_proportions(self.class_proportions, len(classes))
        return len(classes)

    def _check_subset(self, num_fit: int) -> None:
        """Early checks that need only the number of fitted samples (the rest come in ``setup``)."""
        if self.subset is not None and self.subset > num_fit:
            raise ValueError(f"subset={self.subset} must lie in [1, {num_fit}], the fitted {self.name} samples")
        if self.class_proportions is None:
            self._check_fit_size(num_fit if self.subset is None else self.subset)

    def _to_float(self, images: Tensor) -> Tensor:
        """uint8 (N, C, H, W) / 255, or float images as they are, to float32."""
        return images.to(torch.float32).div_(255.0) if images.dtype == torch.uint8 else images.to(torch.float32)

    def _build(self, fit: tuple[Tensor, Tensor, list[str] | None],
               heldout: tuple[Tensor, Tensor, list[str] | None] | None) -> None:
        """Set ``fit_set`` / ``heldout_set`` from (images, labels, paths), scaled per ``scaling``."""
        x = self._to_float(fit[0])
        self._check_fit_size(len(x))
        heldout_x = None if heldout is None else self._to_float(heldout[0])
        if self.scaling == "standard":
            mean = x.mean(dim=(0, 2, 3), dtype=torch.float64)  # (C,)
            # A constant channel (std 0) is only centred: dividing by 0 would turn it into NaN.
            std = x.std(dim=(0, 2, 3)).double().clamp_min(1e-12) if len(x) > 1 else torch.ones_like(mean)
            self.mean, self.std = tuple(mean.tolist()), tuple(std.tolist())
            for images in (x, heldout_x):
                if images is not None:
                    _standardize(images, self.mean, self.std)
        self.fit_set = InMemoryDataset(x, fit[1], fit[2])
        self.heldout_set = None if heldout is None else InMemoryDataset(heldout_x, heldout[1], heldout[2])


def _preview(items: Sequence, limit: int = 5) -> str:
    shown = ", ".join(str(item) for item in list(items)[:limit])
    return shown + (", ..." if len(items) > limit else "")


# ---- image folders ----------------------------------------------------------------------------


def _image_files(folder: Path) -> list[Path]:
    """Image files under ``folder`` (recursively, hidden files and folders left out), in sorted order."""
    return sorted(path for path in folder.rglob("*")
                  if path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()
                  and not any(part.startswith(".") for part in path.relative_to(folder).parts))


def _list_folder(folder: Path, labelled: bool, setting: str) -> tuple[list[Path], list[str] | None, list[int]]:
    """(image paths, class names or None, label of each path) of one folder."""
    if not folder.exists():
        raise FileNotFoundError(f"{setting}={str(folder)!r}: no such folder")
    if not folder.is_dir():
        raise NotADirectoryError(f"{setting}={str(folder)!r} is not a folder")
    if not labelled:
        paths = _image_files(folder)
        if not paths:
            raise FileNotFoundError(f"{setting}={str(folder)!r} holds no images (looked for {', '.join(IMAGE_EXTENSIONS)})")
        return paths, None, [NO_LABEL] * len(paths)
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise FileNotFoundError(f"{setting}={str(folder)!r} has no class sub-folders (the ImageFolder layout is "
                                f"{folder}/<class>/<image>); for one folder of images without classes set labelled=False")
    paths, labels = [], []
    for label, name in enumerate(classes):
        files = _image_files(folder / name)
        if not files:
            raise FileNotFoundError(f"class folder {str(folder / name)!r} holds no images "
                                    f"(looked for {', '.join(IMAGE_EXTENSIONS)})")
        paths += files
        labels += [label] * len(files)
    return paths, classes, labels


def _read_image(path: Path, mode: str) -> Tensor:
    """One image file as uint8 (C, H, W), converted to ``mode`` ("L" or "RGB")."""
    try:
        with Image.open(path) as image:
            return pil_to_tensor(image.convert(mode))
    except (OSError, ValueError, Image.DecompressionBombError) as error:  # UnidentifiedImageError is an OSError
        raise ValueError(f"cannot read image {path}: {error}") from error


def _image_size(path: Path) -> tuple[int, int]:
    """(H, W) of an image from its header, without decoding the pixels."""
    try:
        with Image.open(path) as image:
            width, height = image.size
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise ValueError(f"cannot read image {path}: {error}") from error
    return height, width


class ImageFolderDataModule(_UserDataModule):
    """Images from a folder: one sub-folder per class (torchvision's ImageFolder layout), or unlabelled.

    Labelled (``labelled=True``)::

        data_dir/cat/001.png
        data_dir/cat/002.jpg
        data_dir/dog/abc.png

    the classes are the sub-folders in sorted order (``classes``), images found recursively
    inside each; images lying directly in ``data_dir`` are not used. Unlabelled
    (``labelled=False``): every image under ``data_dir`` (recursively), labels -1, and
    ``num_classes`` gives the number of clusters. Files are taken in sorted path order; the fitted
    images' paths are ``fit_set.paths`` (and ``paths`` lists every file found), so predictions
    name their files. Decoding uses PIL (8-bit images; alpha dropped).

    Args:
        data_dir: the folder of images.
        image_size: (H, W), or one int for square images, that every image is resized to (see the
            module docstring); None: the size of the first image.
        grayscale: read images as one channel ("L"); else as three (RGB). ``input_shape`` is
            (1 or 3, H, W).
        labelled: whether the sub-folders of ``data_dir`` are classes (see above).
        heldout_dir: an optional second folder of the same layout, scored out of sample
            (``heldout/*`` metrics, the ``test`` command). Its class folders must be classes of
            ``data_dir``. Without it, validation scores the fitted images only and ``test`` is refused.
        num_classes: the number of clusters, required without labels; with labels it is the number
            of class folders and may be left unset (if given, it must agree).
        batch_size, eval_batch_size, seed, drop_last, num_workers, on_device: as in
            :class:`lit_otclust.data._InMemoryDataModule`.
        subset: a seeded subset of that many fitted images (class-stratified with labels); only
            those are decoded. The held-out images are cut to at most ``subset`` the same way.
        class_proportions: a seeded per-class subsample with these class proportions (needs labels;
            see :class:`lit_otclust.data._InMemoryDataModule`); ``--model.proportions`` must match.
        scaling: "unit" (pixels / 255) or "standard" (statistics of the fitted images: see
            :class:`_UserDataModule`).

    Raises:
        FileNotFoundError: ``data_dir`` (or ``heldout_dir``) missing, without images, or (labelled)
            without class sub-folders or with an empty class folder; the message names the folder.
        ValueError: an image PIL cannot read (names the file, in ``__init__`` for the first image,
            else in ``setup``); ``num_classes`` missing without labels or disagreeing with the
            class folders; a held-out class unknown to ``data_dir``; the settings of the base class.
    """

    def __init__(
        self,
        data_dir: str,
        image_size: int | tuple[int, int] | None = None,
        grayscale: bool = False,
        labelled: bool = True,
        heldout_dir: str | None = None,
        num_classes: int | None = None,
        batch_size: int = 300,
        eval_batch_size: int | None = None,
        subset: int | None = None,
        class_proportions: list[float] | None = None,
        seed: int = 0,
        scaling: str = "unit",
        drop_last: bool = True,
        num_workers: int = 0,
        on_device: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, eval_batch_size=eval_batch_size, subset=subset,
                         class_proportions=class_proportions, seed=seed, scaling=scaling, drop_last=drop_last,
                         num_workers=num_workers, on_device=on_device)
        self.data_dir = Path(data_dir)
        self.name = f"images in {data_dir}"
        self.grayscale = grayscale
        self.labelled = labelled
        # Listing the files and reading one header is cheap; the pixels are decoded in setup.
        self.paths, self.classes, labels = _list_folder(self.data_dir, labelled, "data_dir")
        self._labels = torch.tensor(labels, dtype=torch.int64)  # (N,)
        self.num_classes = self._resolve_num_classes(num_classes, self.classes, f"data_dir={str(self.data_dir)!r}")
        self.heldout_dir = None if heldout_dir is None else Path(heldout_dir)
        self._heldout_paths: list[Path] | None = None
        if self.heldout_dir is not None:
            self._heldout_paths, heldout_classes, heldout_labels = _list_folder(self.heldout_dir, labelled, "heldout_dir")
            if heldout_classes is not None:
                unknown = sorted(set(heldout_classes) - set(self.classes))
                if unknown:
                    raise ValueError(f"heldout_dir={str(self.heldout_dir)!r} has class folders {unknown} that "
                                     f"data_dir={str(self.data_dir)!r} lacks (its classes: {_preview(self.classes)})")
                # The held-out folder may lack classes: number its labels by data_dir's classes.
                heldout_labels = [self.classes.index(heldout_classes[label]) for label in heldout_labels]
            self._heldout_labels = torch.tensor(heldout_labels, dtype=torch.int64)
        if image_size is None:
            image_size = _image_size(self.paths[0])
        elif isinstance(image_size, int):
            image_size = (image_size, image_size)
        if len(image_size) != 2 or min(image_size) < 1:
            raise ValueError(f"image_size={image_size!r} must be (H, W) with H, W >= 1, or one int")
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.input_shape = (1 if grayscale else 3, *self.image_size)
        self._check_subset(len(self.paths))

    def _decode(self, paths: list[Path]) -> Tensor:
        """The images at ``paths`` as uint8 (N, C, H, W), resized to ``image_size`` where they differ."""
        mode = "L" if self.grayscale else "RGB"
        images = torch.empty((len(paths), *self.input_shape), dtype=torch.uint8)  # (N, C, H, W)
        resized = []
        for i, path in enumerate(paths):
            image = _read_image(path, mode)  # (C, h, w)
            if tuple(image.shape[1:]) != self.image_size:
                image = resize(image, list(self.image_size), antialias=True)
                resized.append(path)
            images[i] = image
        if resized:
            rank_zero_info(f"{len(resized)} of {len(paths)} images resized to {self.image_size[0]}x{self.image_size[1]} "
                           f"(image_size), e.g. {resized[0]}")
        return images

    def setup(self, stage: str | None = None) -> None:
        """Decode the fitted (and held-out) images into float tensors, once for every stage."""
        if self.fit_set is not None:
            return
        keep = self._fit_indices(self._labels)
        fit_pos = list(range(len(self.paths))) if keep is None else keep.tolist()
        fit_paths = [self.paths[i] for i in fit_pos]
        fit = (self._decode(fit_paths), self._labels[fit_pos], [str(p) for p in fit_paths])
        heldout = None
        if self._heldout_paths is not None:
            keep = self._heldout_indices(self._heldout_labels)
            pos = list(range(len(self._heldout_paths))) if keep is None else keep.tolist()
            paths = [self._heldout_paths[i] for i in pos]
            heldout = (self._decode(paths), self._heldout_labels[pos], [str(p) for p in paths])
        self._build(fit, heldout)


# ---- arrays -----------------------------------------------------------------------------------


def _npy_header(fh) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an open .npy stream's header, without reading the data."""
    version = np.lib.format.read_magic(fh)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(fh)
    return tuple(shape), dtype


def _npz_keys(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as archive:
        return [name.removesuffix(".npy") for name in archive.namelist()]


def _load_pt(path: Path):
    try:
        # mmap: a look at the shape (in __init__) does not read the whole file.
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # files of the legacy (non-zip) format cannot be memory-mapped
        return torch.load(path, map_location="cpu", weights_only=True)


def _pt_entry(obj, path: Path, key: str, setting: str):
    if isinstance(obj, Tensor):
        return obj if key == "x" else None
    if isinstance(obj, dict):
        return obj.get(key)
    raise ValueError(f"{setting}={str(path)!r} holds a {type(obj).__name__}; expected a tensor of images or a dict "
                     f"with 'x' (images) and optional 'y' (labels)")


class _ArrayFile:
    """One .npy / .npz / .pt file of images, optionally with labels inside (``y``)."""

    def __init__(self, path: Path, setting: str) -> None:
        self.path, self.setting = path, setting
        if not path.is_file():
            raise FileNotFoundError(f"{setting}={str(path)!r}: no such file")
        self.kind = path.suffix.lower()
        if self.kind not in ARRAY_EXTENSIONS:
            raise ValueError(f"{setting}={str(path)!r}: unknown file type; use one of {', '.join(ARRAY_EXTENSIONS)}")

    def _fail(self, error: Exception) -> ValueError:
        return ValueError(f"cannot read {self.setting}={str(self.path)!r}: {error}")

    def header(self) -> tuple[tuple[int, ...], str]:
        """(shape, dtype name) of the images, from the header where the format has one."""
        try:
            if self.kind == ".npy":
                array = np.load(self.path, mmap_mode="r", allow_pickle=False)
                return tuple(array.shape), array.dtype.name
            if self.kind == ".npz":
                keys = _npz_keys(self.path)
                if "x" not in keys:
                    raise ValueError(f"no array 'x' (it has {keys}); save the images as x, "
                                     f"e.g. np.savez(path, x=images, y=labels)")
                with zipfile.ZipFile(self.path) as archive, archive.open("x.npy") as fh:
                    shape, dtype = _npy_header(fh)
                return shape, dtype.name
            x = _pt_entry(_load_pt(self.path), self.path, "x", self.setting)
            if x is None:
                raise ValueError("the dict has no 'x' (the images)")
            return tuple(x.shape), str(x.dtype).removeprefix("torch.")
        except (OSError, ValueError, KeyError, RuntimeError, zipfile.BadZipFile, EOFError, pickle.UnpicklingError) as error:
            raise self._fail(error) from error

    def read(self, key: str) -> np.ndarray | Tensor | None:
        """The array stored under ``key`` ("x" or "y"; a .npy file is "x" only), or None if absent."""
        try:
            if self.kind == ".npy":
                return np.load(self.path, mmap_mode="r", allow_pickle=False) if key == "x" else None
            if self.kind == ".npz":
                with np.load(self.path, allow_pickle=False) as archive:
                    return archive[key] if key in archive.files else None
            return _pt_entry(_load_pt(self.path), self.path, key, self.setting)
        except (OSError, ValueError, RuntimeError, zipfile.BadZipFile, EOFError, pickle.UnpicklingError) as error:
            raise self._fail(error) from error


def _as_labels(values, num_images: int, where: str, images_where: str) -> Tensor:
    """Labels as int64 (N,), checked: one per image, integer values >= 0."""
    labels = values.numpy(force=True) if isinstance(values, Tensor) else np.array(values)  # a copy, off the file
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise ValueError(f"{where} has shape {labels.shape}; labels must be one integer per image, shape (N,)")
    if len(labels) != num_images:
        raise ValueError(f"{where} has {len(labels)} labels but {images_where} has {num_images} images")
    if labels.dtype.kind == "f":
        if not np.array_equal(labels, np.round(labels)):
            raise ValueError(f"{where} holds non-integer labels (dtype {labels.dtype})")
    elif labels.dtype.kind not in "iu":
        raise ValueError(f"{where} has dtype {labels.dtype}; labels must be integers")
    if len(labels) and labels.min() < 0:
        raise ValueError(f"{where} holds negative labels ({labels.min()}); labels must be >= 0")
    return torch.from_numpy(labels.astype(np.int64))


class ArrayDataModule(_UserDataModule):
    """Images from an array file: .npy, .npz (``x`` and optional ``y``) or .pt (a tensor, or a dict with ``x``, optional ``y``).

    Images are shaped (N, H, W) (one channel), (N, H, W, C) or (N, C, H, W), uint8 (divided by
    255) or float (taken as they are); they become float32 (N, C, H, W). A 4-d array is read as
    channels-last when its last axis has 1, 3 or 4 entries and its second more than 4
    (``channels_last`` overrides that guess). Labels, from ``labels_path`` (a .npy, .npz with ``y``,
    or .pt tensor or dict with ``y``) or from the ``y`` inside the image file, are integers >= 0,
    one per image; their distinct values in increasing order are classes 0..C-1 (``classes`` keeps
    the values). The file's header (and the labels) are read in ``__init__``; the images in ``setup``.

    Args:
        path: the image file.
        labels_path: a separate label file; None: ``y`` in ``path`` if there, else no labels.
        heldout_path, heldout_labels_path: optional held-out images (same C, H, W) and their labels,
            scored out of sample (``heldout/*``, the ``test`` command).
        channels_last: the layout of a 4-d array; None guesses it (above).
        num_classes: the number of clusters, required without labels; with labels it is the number
            of distinct label values and may be left unset (if given, it must agree).
        batch_size, eval_batch_size, subset, class_proportions, seed, scaling, drop_last,
            num_workers, on_device: as in :class:`ImageFolderDataModule`.

    Raises:
        FileNotFoundError: a file is missing (named).
        ValueError: an unknown file type, an unreadable file, images not of rank 3 or 4, or not
            uint8 / float, labels of the wrong length, shape or type (each names its file); labels
            in both ``path`` and ``labels_path``; ``num_classes`` missing without labels.
    """

    def __init__(
        self,
        path: str,
        labels_path: str | None = None,
        heldout_path: str | None = None,
        heldout_labels_path: str | None = None,
        channels_last: bool | None = None,
        num_classes: int | None = None,
        batch_size: int = 300,
        eval_batch_size: int | None = None,
        subset: int | None = None,
        class_proportions: list[float] | None = None,
        seed: int = 0,
        scaling: str = "unit",
        drop_last: bool = True,
        num_workers: int = 0,
        on_device: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, eval_batch_size=eval_batch_size, subset=subset,
                         class_proportions=class_proportions, seed=seed, scaling=scaling, drop_last=drop_last,
                         num_workers=num_workers, on_device=on_device)
        self.path = Path(path)
        self.name = f"images in {path}"
        self._file = _ArrayFile(self.path, "path")
        shape, self._layout = self._check_images(self._file, channels_last)
        self.input_shape = shape[1:]
        self._labels = self._read_labels(self._file, labels_path, "labels_path", shape[0])
        classes = None
        if self._labels is not None:
            values = torch.unique(self._labels)  # sorted
            self.classes = values.tolist()
            self._labels = torch.searchsorted(values, self._labels)  # values -> 0..C-1
            classes = self.classes
        else:
            self._labels = torch.full((shape[0],), NO_LABEL, dtype=torch.int64)
            self.classes = None
        self.num_classes = self._resolve_num_classes(num_classes, classes, f"path={str(self.path)!r}")
        self._heldout_file = None
        if heldout_path is not None:
            self._heldout_file = _ArrayFile(Path(heldout_path), "heldout_path")
            heldout_shape, self._heldout_layout = self._check_images(self._heldout_file, channels_last)
            if heldout_shape[1:] != self.input_shape:
                raise ValueError(f"heldout_path={heldout_path!r} holds images of shape (C, H, W) = {heldout_shape[1:]}, "
                                 f"path={path!r} of {self.input_shape}")
            labels = self._read_labels(self._heldout_file, heldout_labels_path, "heldout_labels_path", heldout_shape[0])
            if labels is None:
                labels = torch.full((heldout_shape[0],), NO_LABEL, dtype=torch.int64)
            elif self.classes is None:
                raise ValueError(f"heldout_path={heldout_path!r} has labels but path={path!r} has none")
            else:
                values = torch.tensor(self.classes)
                unknown = sorted(set(labels.tolist()) - set(self.classes))
                if unknown:
                    raise ValueError(f"held-out labels {_preview(unknown)} do not occur in the labels of path={path!r}")
                labels = torch.searchsorted(values, labels)
            self._heldout_labels = labels
        elif heldout_labels_path is not None:
            raise ValueError("heldout_labels_path is set but heldout_path is not")
        self._check_subset(shape[0])

    @staticmethod
    def _check_images(file: _ArrayFile, channels_last: bool | None) -> tuple[tuple[int, int, int, int], str]:
        """(N, C, H, W) and the layout ("nhw", "nhwc" or "nchw") of a file's images, from its header."""
        shape, dtype = file.header()
        where = f"{file.setting}={str(file.path)!r}"
        if len(shape) in (3, 4) and shape[0] == 0:
            raise ValueError(f"{where} holds no images (shape {shape})")
        if dtype != "uint8" and not dtype.startswith(("float", "bfloat")):
            raise ValueError(f"{where} holds {dtype} images; use uint8 (pixels 0-255) or float")
        if len(shape) == 3:
            n, h, w = shape
            return (n, 1, h, w), "nhw"
        if len(shape) != 4:
            raise ValueError(f"{where} holds an array of shape {shape} (rank {len(shape)}); images must be shaped "
                             f"(N, H, W), (N, H, W, C) or (N, C, H, W)")
        if channels_last is None:  # (N, 32, 32, 3) is channels-last, (N, 3, 32, 32) and (N, 2, 4, 4) are not
            channels_last = shape[3] in (1, 3, 4) and shape[1] > 4
        n, c, h, w = (shape[0], shape[3], shape[1], shape[2]) if channels_last else shape
        return (n, c, h, w), "nhwc" if channels_last else "nchw"

    @staticmethod
    def _read_labels(file: _ArrayFile, labels_path: str | None, setting: str, num_images: int) -> Tensor | None:
        inside = file.read("y") if file.kind != ".npy" else None
        images_where = f"{file.setting}={str(file.path)!r}"
        if labels_path is None:
            return None if inside is None else _as_labels(inside, num_images, f"{images_where} (its 'y')", images_where)
        if inside is not None:
            raise ValueError(f"{images_where} holds labels ('y') and {setting}={labels_path!r} gives others; keep one")
        labels_file = _ArrayFile(Path(labels_path), setting)
        values = labels_file.read("x") if labels_file.kind == ".npy" else labels_file.read("y")
        if values is None and labels_file.kind == ".pt":
            values = labels_file.read("x")  # a bare tensor of labels
        if values is None:
            raise ValueError(f"{setting}={labels_path!r} has no labels: save them as a .npy array, as 'y' in a .npz, "
                             f"or as a .pt tensor")
        return _as_labels(values, num_images, f"{setting}={labels_path!r}", images_where)

    def _images(self, file: _ArrayFile, layout: str, keep: Tensor | None) -> Tensor:
        """The kept images of a file as (n, C, H, W), uint8 or float, read once."""
        x = file.read("x")
        if isinstance(x, np.ndarray):  # np.array copies a memory-mapped .npy into memory we own
            x = torch.from_numpy(np.array(x) if keep is None else x[keep.numpy()])
        else:  # a tensor of a memory-mapped .pt: gather or copy it into memory
            x = x.clone() if keep is None else x[keep]
        if layout == "nhw":
            x = x.unsqueeze(1)
        elif layout == "nhwc":
            x = x.permute(0, 3, 1, 2)
        return x.contiguous()

    def setup(self, stage: str | None = None) -> None:
        """Read the kept images into float tensors, once for every stage."""
        if self.fit_set is not None:
            return
        keep = self._fit_indices(self._labels)
        fit = (self._images(self._file, self._layout, keep), self._labels if keep is None else self._labels[keep], None)
        heldout = None
        if self._heldout_file is not None:
            keep = self._heldout_indices(self._heldout_labels)
            heldout = (self._images(self._heldout_file, self._heldout_layout, keep),
                       self._heldout_labels if keep is None else self._heldout_labels[keep], None)
        self._build(fit, heldout)
