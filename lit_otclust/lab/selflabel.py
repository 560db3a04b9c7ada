r"""Self-labelling with prescribed sizes: a clustering loss under study, plugged in from the lab.

With the cost :math:`C_{ik} = \|z_i - \mu_k\|^2` of a batch of m embeddings, the soft k-means assignment
:math:`q_{ik} = \mathrm{softmax}_k(-C_{ik}/\epsilon)` and the entropic OT plan :math:`P` of the batch (weights 1/m)
to the centers (weights w) at the same :math:`\epsilon`, the targets are :math:`T = mP` (rows sum to 1, no gradient
through them) and the loss is :math:`\epsilon` times the KL divergence of q from T, averaged over the batch:

.. math::
    \ell = \frac{\epsilon}{m} \sum_i \mathrm{KL}(T_{i\cdot} \,\|\, q_{i\cdot})
         = \frac{1}{m} \sum_i \Big( \sum_k T_{ik} C_{ik} + \epsilon \log \sum_k e^{-C_{ik}/\epsilon}
           + \epsilon \sum_k T_{ik} \log T_{ik} \Big) \ge 0,

the expected cost under the size-constrained plan less the soft-min of soft k-means (Proposition 2 of the paper)
less the targets' entropy (a constant), in the units of a squared distance; zero when q meets the sizes. Its gradient in z and mu is :math:`\sum_k (T_{ik} - q_{ik}) \nabla C_{ik}`: zero
for a point whose nearest centers already respect the sizes, so unlike the OT loss (gradient
:math:`\sum_k T_{ik}\nabla C_{ik}`) it does not pull every point onto a center; it moves only the points that the
sizes re-assign. This is SeLa's self-labelling (Asano et al. 2020) and SwAV's swapped prediction with the plan as
target, with prescribed sizes w instead of equal ones.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_otclust.losses import ClusteringLoss
from lit_otclust.sinkhorn import sinkhorn, squared_distances


class SelfLabelling(ClusteringLoss):
    """KL divergence of the soft k-means assignment from the size-constrained plan (module docstring).

    Args:
        epsilon: the temperature of q and the entropic regularisation of the plan, in units of ``||z - mu||^2``.
        max_iter, tol: the solve of the plan (:func:`lit_otclust.sinkhorn.sinkhorn`, warm-started across batches).
    """

    tag = "self_labelling"
    constrains_sizes = True

    def __init__(self, epsilon: float = 0.01, max_iter: int = 1000, tol: float = 1e-4) -> None:
        super().__init__()
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        self.epsilon, self.max_iter, self.tol = epsilon, max_iter, tol
        self._g: Tensor | None = None

    def forward(self, z: Tensor, centers: Tensor, proportions: Tensor) -> tuple[Tensor, dict[str, Tensor | float]]:
        cost = squared_distances(z.float(), centers.float())  # (m, K)
        with torch.no_grad():
            g_init = None if self._g is None else self._g.to(cost)
            res = sinkhorn(cost.detach(), b=proportions.to(cost), epsilon=self.epsilon, max_iter=self.max_iter,
                           tol=self.tol, g_init=g_init, warn=False)
            self._g = res.g.detach()
            targets = res.plan * len(cost)  # (m, K), rows sum to 1
            entropy = -(targets * targets.clamp_min(1e-30).log()).sum(1)  # (m,), 0 log 0 = 0
        softmin = -self.epsilon * torch.logsumexp(-cost / self.epsilon, dim=1)  # (m,)
        loss = ((targets * cost).sum(1) - softmin - self.epsilon * entropy).mean()
        moved = (targets.argmax(1) != cost.detach().argmin(1)).float().mean()
        return loss, {"plan_moved": moved, "epsilon": self.epsilon}
