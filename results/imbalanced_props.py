"""The proportion vectors of results/run_imbalanced_cpu.sh (issue #12), printed as the script writes them.

    python results/imbalanced_props.py

- ``W2``: the two-digit set, 20% / 80%.
- ``W10``: the 10-class long-tailed set, ``geometric_proportions(10, 10.0)`` (largest/smallest = 10).
- ``W3``: the same with largest/smallest = 3 (results/run_imbalanced2_cpu.sh), the middle point of
  the accuracy-against-imbalance figure; ``W1_OFF``: the misspecified uniform w of balanced MNIST.
- ``*_OFF``: a misspecified w: the true proportions with class k scaled by 1.3 (k even) or 0.7
  (k odd), i.e. +-30% alternately, then renormalised to sum to 1.

Each vector is rounded to 4 decimals, the largest entry taking 1 minus the others, so that the
printed numbers sum to 1 (the data module and the model accept 1e-6 of slack).
"""

from __future__ import annotations

import math

from lit_otclust.data import geometric_proportions


def misspecified(w: list[float], change: float = 0.3) -> list[float]:
    """w_k (1 + change) for even k, w_k (1 - change) for odd k, renormalised."""
    off = [p * (1 + change if k % 2 == 0 else 1 - change) for k, p in enumerate(w)]
    return [p / math.fsum(off) for p in off]


def rounded(w: list[float], digits: int = 4) -> list[float]:
    """w rounded to ``digits`` decimals, the largest entry set to 1 minus the others."""
    out = [round(p, digits) for p in w]
    top = max(range(len(w)), key=lambda k: w[k])
    out[top] = round(1 - math.fsum(p for k, p in enumerate(out) if k != top), digits)
    return out


def vectors() -> dict[str, list[float]]:
    two, ten, three, one = [0.2, 0.8], geometric_proportions(10, 10.0), geometric_proportions(10, 3.0), [0.1] * 10
    return {"W2": rounded(two), "W2_OFF": rounded(misspecified(two)),
            "W10": rounded(ten), "W10_OFF": rounded(misspecified(ten)),
            "W3": rounded(three), "W3_OFF": rounded(misspecified(three)), "W1_OFF": rounded(misspecified(one))}


if __name__ == "__main__":
    for name, w in vectors().items():
        print(f"{name}=[{','.join(repr(p) for p in w)}]")
