"""k-means on raw pixels: Table 1's first column.

    python -m lit_otclust.lab.baselines --config configs/mnist_kmeans.yaml --data_dir ../shared/data

prints the Hungarian accuracy, NMI and ARI as one JSON line (and writes it to ``output`` if set).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from jsonargparse import CLI

from lit_otclust.clustering import kmeans
from lit_otclust.data import CIFAR10DataModule, ImageFolderDataModule, MNISTDataModule
from lit_otclust.metrics import hungarian_accuracy
from lit_otclust.sinkhorn import squared_distances

DATA_MODULES = {"mnist": MNISTDataModule, "cifar10": CIFAR10DataModule, "folder": ImageFolderDataModule}


def kmeans_raw(dataset: str = "mnist", data_dir: str = "data", download: bool = True, fit_split: str = "all",
               subset: int | None = None, scaling: str = "unit", n_init: int = 10, seed: int = 0,
               output: str | None = None, image_size: int | None = None, grayscale: bool = False) -> dict[str, float]:
    """Cluster the raw pixels with k-means (k-means++, ``n_init`` restarts) and score the clusters.

    Args:
        dataset: "mnist", "cifar10" or "folder" (a folder of images in class sub-folders, read as
            :class:`~lit_otclust.data.ImageFolderDataModule` reads it: the pixels a folder run clusters).
        data_dir, download, fit_split, subset, scaling: as in the data modules (download and fit_split: not
            for a folder).
        image_size, grayscale: a folder's, as in :class:`~lit_otclust.data.ImageFolderDataModule`.
        n_init: k-means restarts (the best inertia is kept).
        seed: seeds k-means and the subset.
        output: a JSON file to write the scores to.
    """
    if dataset not in DATA_MODULES:
        raise ValueError(f"dataset={dataset!r} is unknown; choose one of {sorted(DATA_MODULES)}")
    common = dict(data_dir=data_dir, subset=subset, seed=seed, scaling=scaling, batch_size=1, drop_last=False)
    dm = (ImageFolderDataModule(image_size=image_size, grayscale=grayscale, **common) if dataset == "folder" else
          DATA_MODULES[dataset](download=download, fit_split=fit_split, **common))
    dm.prepare_data()
    dm.setup("fit")
    x, y = dm.fit_set.x.flatten(1), dm.fit_set.y
    start = time.perf_counter()
    centers = kmeans(x, dm.num_classes, n_init, seed)
    pred = squared_distances(x, centers).argmin(1)
    scores = {k: float(v) for k, v in hungarian_accuracy(pred, y, dm.num_classes, dm.num_classes).items() if v.ndim == 0}
    scores.update(dataset=dataset, n=len(y), n_init=n_init, seed=seed, seconds=round(time.perf_counter() - start, 1))
    print(json.dumps(scores))
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(scores, indent=1) + "\n")
    return scores


if __name__ == "__main__":
    CLI(kmeans_raw, as_positional=False)
