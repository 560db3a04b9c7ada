"""An array file of images or features (.npy, .npz, .pt) as a data module, with labels inside or beside it.

The file's header (and the labels) are read in ``__init__``, the samples in ``setup``. Arrays already in
memory take the same path (:meth:`ArrayDataModule.from_arrays`). Labels and the rest of the contract:
:mod:`lit_otclust.data.user`.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lit_otclust.data.user import NO_LABEL, UserDataModule, preview

ARRAY_EXTENSIONS = (".npy", ".npz", ".pt", ".pth")


def _npy_header(fh) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from an open .npy stream's header, without reading the data."""
    version = np.lib.format.read_magic(fh)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(fh)
    return tuple(shape), dtype


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
    """One .npy / .npz / .pt file of samples, optionally with labels inside (``y``)."""

    def __init__(self, path: Path, setting: str) -> None:
        self.path, self.setting = path, setting
        self.where = f"{setting}={str(path)!r}"  # how the messages name it
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
                with zipfile.ZipFile(self.path) as archive:
                    keys = [name.removesuffix(".npy") for name in archive.namelist()]
                    if "x" not in keys:
                        raise ValueError(f"no array 'x' (it has {keys}); save the images as x, "
                                         f"e.g. np.savez(path, x=images, y=labels)")
                    with archive.open("x.npy") as fh:
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


class _InMemoryArrays:
    """Samples ``x`` and optional labels ``y`` already in memory (numpy or torch), read like an :class:`_ArrayFile`."""

    kind = "memory"

    def __init__(self, x: np.ndarray | Tensor, y: np.ndarray | Tensor | None, setting: str = "x") -> None:
        if not isinstance(x, (np.ndarray, Tensor)):
            raise TypeError(f"{setting} is a {type(x).__name__}; pass a numpy array or a torch tensor")
        self.x, self.y, self.setting, self.where = x, y, setting, f"the array {setting}"

    def header(self) -> tuple[tuple[int, ...], str]:
        dtype = self.x.dtype.name if isinstance(self.x, np.ndarray) else str(self.x.dtype).removeprefix("torch.")
        return tuple(self.x.shape), dtype

    def read(self, key: str) -> np.ndarray | Tensor | None:
        return self.x if key == "x" else self.y


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


class ArrayDataModule(UserDataModule):
    """Images or features from an array file: .npy, .npz (``x``, optional ``y``) or .pt (a tensor, or a dict
    with ``x``, ``y``); arrays in memory: :meth:`from_arrays`.

    Samples are features (N, d) (e.g. a pretrained network's embeddings, for the MLP autoencoder) or images (N, H, W),
    (N, H, W, C) or (N, C, H, W), uint8 (divided by 255) or float (as they are); they become float32 (N, d) or
    (N, C, H, W). A 4-d array is read as channels-last when its last axis has 1, 3 or 4 entries and its second more
    than 4 (``channels_last`` overrides that guess). Labels, from
    ``labels_path`` (a .npy, .npz with ``y``, or .pt tensor or dict with ``y``) or from the ``y`` inside the image file,
    are integers >= 0, one per image; their distinct values in increasing order are classes 0..C-1 (``classes`` keeps
    the values).

    Args:
        path: the file of images or features.
        labels_path: a separate label file; None: ``y`` in ``path`` if there, else no labels.
        heldout_path, heldout_labels_path: optional held-out samples (same shape) and their labels,
            scored out of sample (``heldout/*``, the ``test`` command).
        channels_last: the layout of a 4-d array; None guesses it (above).
        num_classes: the number of clusters, required without labels; with labels, unset or the label values'.
        **loader: the loader settings of :class:`~lit_otclust.data.base.InMemoryDataModule`, as
            for :class:`~lit_otclust.data.folder.ImageFolderDataModule`.

    Raises:
        FileNotFoundError: a file is missing (named).
        ValueError: an unknown file type, an unreadable file, samples not of rank 2, 3 or 4, or not uint8 / float,
            labels of the wrong length, shape or type (each names its file); labels in both ``path`` and
            ``labels_path``; ``num_classes`` missing without labels.
    """

    def __init__(
        self,
        path: str,
        labels_path: str | None = None,
        heldout_path: str | None = None,
        heldout_labels_path: str | None = None,
        channels_last: bool | None = None,
        num_classes: int | None = None,
        **loader: Any,
    ) -> None:
        super().__init__(**loader)
        # An _InMemoryArrays comes from from_arrays only: the command line always gives a file name.
        self._file = path if isinstance(path, _InMemoryArrays) else _ArrayFile(Path(path), "path")
        self.path = None if isinstance(path, _InMemoryArrays) else Path(path)
        self.name = f"samples in {path}" if self.path is not None else "samples of the array"
        shape, self._layout = self._check_images(self._file, channels_last)
        self.input_shape = shape[1:]
        self._labels = self._read_labels(self._file, labels_path, "labels_path", shape[0])
        self.classes = None
        if self._labels is not None:
            values = torch.unique(self._labels)  # sorted
            self.classes = values.tolist()
            self._labels = torch.searchsorted(values, self._labels)  # values -> 0..C-1
        else:
            self._labels = torch.full((shape[0],), NO_LABEL, dtype=torch.int64)
        self.num_classes = self._resolve_num_classes(num_classes, self.classes, self._file.where)
        self._heldout_file = None
        if heldout_path is not None:
            self._heldout_file = _ArrayFile(Path(heldout_path), "heldout_path")
            heldout_shape, self._heldout_layout = self._check_images(self._heldout_file, channels_last)
            if heldout_shape[1:] != self.input_shape:
                raise ValueError(f"heldout_path={heldout_path!r} holds samples of shape {heldout_shape[1:]}, "
                                 f"{self._file.where} of {self.input_shape}")
            labels = self._read_labels(self._heldout_file, heldout_labels_path, "heldout_labels_path", heldout_shape[0])
            if labels is None:
                labels = torch.full((heldout_shape[0],), NO_LABEL, dtype=torch.int64)
            elif self.classes is None:
                raise ValueError(f"heldout_path={heldout_path!r} has labels but {self._file.where} has none")
            else:
                values = torch.tensor(self.classes)
                unknown = sorted(set(labels.tolist()) - set(self.classes))
                if unknown:
                    raise ValueError(f"held-out labels {preview(unknown)} do not occur in the labels of "
                                     f"{self._file.where}")
                labels = torch.searchsorted(values, labels)
            self._heldout_labels = labels
        elif heldout_labels_path is not None:
            raise ValueError("heldout_labels_path is set but heldout_path is not")
        self._check_subset(shape[0], f"the fitted {self.name} samples")

    @classmethod
    def from_arrays(cls, x: np.ndarray | Tensor, y: np.ndarray | Tensor | None = None,
                    channels_last: bool | None = None, num_classes: int | None = None,
                    **loader: Any) -> ArrayDataModule:
        """The module of samples already in memory: ``x`` as the file's ``x``, ``y`` as its labels (or None).

        The same shapes, dtypes, labels and loader settings as a file (the class docstring); ``x`` is copied in
        ``setup``, so the caller's array is never written to. :class:`lit_otclust.OTClustering` fits through it.

        Example:
            >>> module = ArrayDataModule.from_arrays(np.zeros((6, 3), dtype=np.float32), num_classes=2, batch_size=2)
            >>> module.input_shape, module.num_classes
            ((3,), 2)
        """
        return cls(_InMemoryArrays(x, y), channels_last=channels_last, num_classes=num_classes, **loader)

    @staticmethod
    def _check_images(file: _ArrayFile | _InMemoryArrays, channels_last: bool | None) -> tuple[tuple[int, ...], str]:
        """(N, d) or (N, C, H, W), and the layout ("nd", "nhw", "nhwc" or "nchw") of a file's samples."""
        shape, dtype = file.header()
        where = file.where
        kind = "features" if len(shape) == 2 else "images"
        if len(shape) in (2, 3, 4) and 0 in shape:
            raise ValueError(f"{where} holds no {kind} (shape {shape})")
        if dtype != "uint8" and not dtype.startswith(("float", "bfloat")):
            raise ValueError(f"{where} holds {dtype} {kind}; use uint8 (pixels 0-255) or float")
        if len(shape) == 2:
            return shape, "nd"
        if len(shape) == 3:
            n, h, w = shape
            return (n, 1, h, w), "nhw"
        if len(shape) != 4:
            raise ValueError(f"{where} holds an array of shape {shape} (rank {len(shape)}); samples must be features "
                             f"shaped (N, d) or images shaped (N, H, W), (N, H, W, C) or (N, C, H, W)")
        if channels_last is None:  # (N, 32, 32, 3) is channels-last, (N, 3, 32, 32) and (N, 2, 4, 4) are not
            channels_last = shape[3] in (1, 3, 4) and shape[1] > 4
        n, c, h, w = (shape[0], shape[3], shape[1], shape[2]) if channels_last else shape
        return (n, c, h, w), "nhwc" if channels_last else "nchw"

    @staticmethod
    def _read_labels(file: _ArrayFile | _InMemoryArrays, labels_path: str | None, setting: str,
                     num_images: int) -> Tensor | None:
        inside = file.read("y") if file.kind != ".npy" else None
        images_where = file.where
        if labels_path is None:
            where = "the array y" if file.kind == "memory" else f"{images_where} (its 'y')"
            return None if inside is None else _as_labels(inside, num_images, where, images_where)
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

    def _images(self, file: _ArrayFile | _InMemoryArrays, layout: str, keep: Tensor | None) -> Tensor:
        """The kept samples of a file as (n, d) or (n, C, H, W), uint8 or float, read once."""
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
        """Read the kept samples into float tensors, once for every stage."""
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
