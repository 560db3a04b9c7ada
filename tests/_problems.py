"""Random OT problems shared by the solver tests, here so that tests needing no POT (test_cuda) import none."""

from __future__ import annotations

import torch


def _problem(n: int, k: int, seed: int, dtype=torch.float64, p: int = 4):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(n, p, generator=gen, dtype=dtype)
    centers = torch.randn(k, p, generator=gen, dtype=dtype)
    a = torch.rand(n, generator=gen, dtype=dtype) + 0.2
    b = torch.rand(k, generator=gen, dtype=dtype) + 0.2
    return z, centers, a / a.sum(), b / b.sum()
