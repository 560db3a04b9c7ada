"""The folder and array data modules' former home, kept so that configs and commands naming
``lit_otclust.user_data.ImageFolderDataModule`` (or ``ArrayDataModule``) still resolve; they live in
:mod:`lit_otclust.data` now (:mod:`lit_otclust.data.folder`, :mod:`lit_otclust.data.arrays`)."""

from lit_otclust.data import ArrayDataModule, ImageFolderDataModule

__all__ = ["ArrayDataModule", "ImageFolderDataModule"]
