r"""DEC's clustering loss (Xie et al. 2016), with IDEC's kept reconstruction when trained beside it: a loss under
study, plugged in from the lab.

With :math:`C_{ik} = \|z_i - \mu_k\|^2` for a batch of m embeddings, the soft assignment is a Student's t kernel,

.. math::
    q_{ik} = \frac{(1 + C_{ik}/\alpha)^{-(\alpha+1)/2}}{\sum_j (1 + C_{ij}/\alpha)^{-(\alpha+1)/2}},

the target sharpens it and divides by each cluster's soft frequency :math:`f_k = \sum_i q_{ik}` (no gradient
through it), here weighted by the cluster proportions w,

.. math::
    p_{ik} = \frac{w_k\, q_{ik}^2 / f_k}{\sum_j w_j\, q_{ij}^2 / f_j},

and the loss is :math:`\frac{1}{m}\sum_i \mathrm{KL}(p_{i\cdot} \| q_{i\cdot})`. With w uniform the target is DEC's
own; a larger w_k lets cluster k keep more points. DEC recomputes p over the whole data set every T steps; here p
comes from the batch (IDEC's per-batch variant), so the loss needs no pass outside the training step. The KL is
dimensionless, not a squared distance: against the per-image summed reconstruction, IDEC's weight 0.1 on the
per-input mean reads as ``clustering_weight`` 0.1 d (d the input size).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_otclust.losses import ClusteringLoss
from lit_otclust.sinkhorn import squared_distances


class DECLoss(ClusteringLoss):
    """KL divergence of DEC's Student's t assignment from its sharpened, size-weighted target (module docstring).

    Args:
        alpha: the Student's t degrees of freedom (DEC: 1).
    """

    tag = "dec"

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.alpha = alpha

    def soft_assignment(self, z: Tensor, centers: Tensor) -> Tensor:
        """log q (m, K), each row a log-distribution: -(alpha+1)/2 log(1 + C/alpha), less its row's logsumexp."""
        cost = squared_distances(z, centers)  # (m, K), float32 at least
        logits = -(self.alpha + 1) / 2 * torch.log1p(cost / self.alpha)
        return torch.log_softmax(logits, dim=1)

    def forward(self, z: Tensor, centers: Tensor, proportions: Tensor) -> tuple[Tensor, dict[str, Tensor | float]]:
        log_q = self.soft_assignment(z, centers)  # (m, K)
        with torch.no_grad():
            q = log_q.exp()
            weight = proportions.to(q) / q.sum(0).clamp_min(torch.finfo(q.dtype).tiny)  # w_k / f_k, (K,)
            target = q.pow(2) * weight
            target = target / target.sum(1, keepdim=True)  # (m, K)
        loss = torch.nn.functional.kl_div(log_q, target, reduction="batchmean")
        moved = (target.argmax(1) != log_q.detach().argmax(1)).float().mean()
        return loss, {"plan_moved": moved}
