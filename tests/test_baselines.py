"""k-means on raw pixels (Table 1, column 1) through its command."""

from __future__ import annotations

import json

import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from lit_otclust.baselines import kmeans_raw
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
