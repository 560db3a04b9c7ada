"""k-means on raw pixels (Table 1, column 1) through its command."""

from __future__ import annotations

import json

import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from lit_otclust.lab.baselines import kmeans_raw
from lit_otclust.data import MNISTDataModule


def test_kmeans_raw_scores_sklearn_clusters(data_dir, tmp_path, capsys):
    out = tmp_path / "mnist.json"
    scores = kmeans_raw("mnist", str(data_dir), download=False, fit_split="train", subset=1000, n_init=2,
                        seed=0, output=str(out))
    assert json.loads(capsys.readouterr().out) == json.loads(out.read_text()) == scores
    dm = MNISTDataModule(str(data_dir), download=False, fit_split="train", subset=1000, seed=0)
    dm.setup()
    labels = KMeans(10, n_init=2, random_state=0).fit(dm.fit_set.x.double().numpy()).labels_
    assert scores["nmi"] == pytest.approx(normalized_mutual_info_score(dm.fit_set.y.numpy(), labels), abs=1e-6)
    assert 0.3 < scores["acc"] < 0.8  # k-means on pixels: the paper reports 0.513 on all of MNIST


def test_unknown_dataset_is_named():
    with pytest.raises(ValueError, match="dataset='svhn'"):
        kmeans_raw("svhn")


def test_kmeans_raw_of_a_folder_clusters_the_pixels_the_folder_module_reads(tmp_path, capsys):
    """Three classes of 12 PNGs each (dark, mid, bright noise around three levels, one of them 40x40 to be resized):
    k-means of the folder's pixels finds them exactly, and its NMI is sklearn's on the pixels the module reads."""
    import numpy as np
    from PIL import Image

    from lit_otclust.data import ImageFolderDataModule

    rng = np.random.default_rng(0)
    for level, name in [(30, "dark"), (128, "mid"), (220, "bright")]:
        (tmp_path / name).mkdir()
        for i in range(12):
            size = 40 if i == 0 else 32
            pixels = np.clip(level + rng.normal(0, 10, (size, size)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(tmp_path / name / f"{i}.png")
    scores = kmeans_raw("folder", str(tmp_path), n_init=2, image_size=32, grayscale=True)
    assert scores["acc"] == 1.0 and scores["n"] == 36
    dm = ImageFolderDataModule(str(tmp_path), image_size=32, grayscale=True, batch_size=1)
    dm.setup()
    labels = KMeans(3, n_init=2, random_state=0).fit(dm.fit_set.x.flatten(1).double().numpy()).labels_
    assert scores["nmi"] == pytest.approx(normalized_mutual_info_score(dm.fit_set.y.numpy(), labels), abs=1e-6)
