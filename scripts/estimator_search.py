"""Where size-constrained k-means scores below k-means on long-tailed real features, does a better search help?
``python scripts/estimator_search.py`` writes results/estimator_search.md (RESULTS, "Arrays and features").

The long-tailed feature sets of ``scripts/estimator_features.py`` (shares falling by 0.75 class to class, seeds 0-2),
each fitted by :func:`lit_otclust.clustering.constrained_kmeans` told the class shares, its search varied: the default
(20 restarts, epsilon 0.01), 80 restarts, epsilon 0.1 and 0.001, epsilon annealed (the search at 0.1, Lloyd's
iterations continued at 0.01), and two starts outside the search: k-means' own solution (sklearn, 10 restarts; w
matched to its clusters by size) and the class means (each class carrying its share), each run to convergence at
0.01. Per cell: Hungarian accuracy, and the transport cost (mean squared distance to the assigned center under the
size-constrained plan at epsilon 0.01, lower is better: what every search minimises). A search that found the classes
would show a higher accuracy at a cost at or below the default's; where the class start ends at a higher cost, the
objective itself prefers another partition.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.preprocessing import StandardScaler

from lit_otclust.clustering import constrained_kmeans, constrained_lloyd, impose, match_sizes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from estimator_features import REPO, long_tailed, mnist_pca, scores  # noqa: E402


def converge(z: torch.Tensor, w: torch.Tensor, centers: torch.Tensor,
             epsilon: float = 1e-2) -> tuple[float, torch.Tensor]:
    """Lloyd's iterations at ``epsilon`` from ``centers`` (center k carrying w_k): the transport cost, the labels."""
    _, mu, g = constrained_lloyd(z, w, centers.double(), epsilon=epsilon)
    cost, _, _ = constrained_lloyd(z, w, mu, max_iter=0)
    return cost, impose(z, mu, w, potentials=g)[0]


def variants(x: np.ndarray, y: np.ndarray) -> dict[str, tuple[float, float]]:
    """Each search's (accuracy, transport cost) on x, told the class shares."""
    k = len(np.unique(y))
    w, z = torch.as_tensor(np.bincount(y) / len(y)), torch.as_tensor(x, dtype=torch.float64)
    out, found = {}, {}
    for name, kwargs in (("default", {}), ("80 restarts", {"n_init": 80}), ("epsilon 0.1", {"epsilon": 0.1}),
                         ("epsilon 0.001", {"epsilon": 1e-3})):
        found[name], _, labels = constrained_kmeans(torch.as_tensor(x), w, seed=0, **kwargs)
        cost, _, _ = constrained_lloyd(z, w, found[name].double(), max_iter=0)
        out[name] = (scores(labels.numpy(), y, k)[0], cost)
    cost, labels = converge(z, w, found["epsilon 0.1"])  # annealed: the search at 0.1, Lloyd continued at 0.01
    out["annealed 0.1 -> 0.01"] = (scores(labels.numpy(), y, k)[0], cost)
    km = KMeans(k, n_init=10, random_state=0).fit(x)
    share = torch.argsort(match_sizes(torch.as_tensor(np.bincount(km.labels_, minlength=k), dtype=torch.float64), w))
    cost, labels = converge(z, w, torch.as_tensor(km.cluster_centers_)[torch.argsort(share)])
    out["from k-means' solution"] = (scores(labels.numpy(), y, k)[0], cost)
    cost, labels = converge(z, w, torch.stack([z[torch.as_tensor(y) == j].mean(0) for j in range(k)]))
    out["from the class means"] = (scores(labels.numpy(), y, k)[0], cost)
    out["k-means (unconstrained)"] = (scores(km.labels_, y, k)[0], float("nan"))
    return out


def main(out: Path) -> None:
    torch.set_num_threads(1)
    sets = [(name, StandardScaler().fit_transform(x), y) for name, (x, y) in
            (("wine", load_wine(return_X_y=True)), ("breast cancer", load_breast_cancer(return_X_y=True)),
             ("iris", load_iris(return_X_y=True)), ("digits", load_digits(return_X_y=True)))]
    rows, header = [], None
    for name, x, y in [*sets, ("MNIST test PCA-50", *mnist_pca())]:
        for seed in (0, 1, 2):
            result = variants(*long_tailed(x, y, seed))
            header = header or list(result)
            cells = [f"{acc:.3f}" + ("" if np.isnan(cost) else f" ({cost:.6g})") for acc, cost in result.values()]
            rows.append(f"| {name} seed {seed} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    text = [__doc__.strip(), "", "Accuracy (transport cost) per search:", "",
            "| data | " + " | ".join(header) + " |", "|---|" + "---|" * len(header), *rows]
    out.write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main(REPO / "results" / "estimator_search.md")
