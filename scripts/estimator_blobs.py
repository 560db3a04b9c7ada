"""OTClustering with its MLP autoencoder (``autoencoder="mlp"``) against k-means on overlapping blobs of known
proportions: ``python scripts/estimator_blobs.py`` writes results/estimator_blobs.md (README's numbers). Three
unit-variance Gaussian blobs on a triangle of side 3, 60 / 30 / 10 % of 1,000 points, 6 data seeds; k-means (10
restarts) and OTClustering told the proportions (100 epochs) with each initialisation, 3 random states a data seed.
Accuracy is Hungarian-matched; sizes are the shares of the points in the cluster matched to each class.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_estimator import _blobs, _matched  # noqa: E402  (the test's data and scoring, one definition)

from lit_otclust import OTClustering  # noqa: E402

W = [0.6, 0.3, 0.1]


def main(out: Path) -> None:
    rows, beats = [], {"glorot": 0, "torch": 0}
    for data_seed in range(6):
        X, y, _ = _blobs([600, 300, 100], seed=data_seed)
        km_acc, km_sizes = _matched(KMeans(3, n_init=10, random_state=0).fit(X).labels_, y)
        rows.append(f"| {data_seed} | k-means | — | {km_acc:.3f} | {' / '.join(f'{v:.3f}' for v in km_sizes)} |")
        for init in ("glorot", "torch"):
            for state in range(3):
                model = OTClustering(3, proportions=W, autoencoder="mlp", weight_init=init, max_epochs=100,
                                     random_state=state).fit(X)
                acc, sizes = _matched(model.labels_, y)
                beats[init] += acc >= km_acc
                rows.append(f"| {data_seed} | OTClustering, {init} init | {state} | {acc:.3f} | "
                            f"{' / '.join(f'{v:.3f}' for v in sizes)} |")
    text = [__doc__.strip(), "", "| data seed | method | random_state | accuracy | sizes (classes of 60 / 30 / 10 %) |",
            "|---|---|---|---|---|", *rows, "",
            f"OTClustering at or above k-means' accuracy: glorot {beats['glorot']} of 18, torch {beats['torch']} of 18."]
    out.write_text("\n".join(text) + "\n")
    print(text[-1])


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "results" / "estimator_blobs.md")
