"""The joint phase's forward, OT solve and backward as one replayable step (``DeepClustering(cuda_graph=True)``).

A step of ``fit`` on a GPU launches ~700 small kernels and waits on the host several times (the Sinkhorn's
stopping rule): it is bound by the host, not the GPU (``benchmarks/README.md``). Here the balanced OT problem is
solved by :func:`lit_otclust.ot.sync_free_solve` (fixed iterations and Newton trials, every choice on the device),
so the step has no host synchronisation and, on CUDA, is captured once as a CUDA graph and replayed: one launch.
The optimizer's step is not in the graph: Lightning's loop takes it eagerly, with the gradients this step left
(``grads``), so its step counters, learning-rate schedule, gradient clipping and checks are unchanged.

Plain torch. On a CPU, or on CUDA before the capture (``warmup`` steps, on a side stream as capture needs), the
same step runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from lit_otclust.ot import _objective, squared_distances, sync_free_solve


class GraphedOTStep:
    r"""``recon(x, g(f(x))) + weight * OT_eps(f(x), mu)``, its gradient, and the statistics a training step logs.

    The OT term is :func:`lit_otclust.ot.ot_clustering_loss`'s (balanced, envelope gradient) at the plan of
    :func:`~lit_otclust.ot.sync_free_solve` from the warm start ``g`` (K,), which it updates in place (the gauge
    :math:`\langle w, g\rangle = 0`). Every tensor the step reads or writes keeps its address from one step to the
    next, as a graph's replay needs: the batch is copied into a static buffer, the outputs are static tensors.

    Args:
        autoencoder: returns ``(z, x_hat)`` for a batch.
        centers: (K, p) parameter. proportions: (K,) w. g: (K,) float warm start, read and written.
        params: every parameter the loss reaches (they get ``.grad``).
        recon: the reconstruction loss ``recon(x, x_hat)``, a scalar.
        epsilon, weight: the entropic regularisation and lambda.
        iters, trials, continuation: :func:`~lit_otclust.ot.sync_free_solve`'s.
        warmup: eager steps on CUDA before the capture.
    """

    def __init__(self, autoencoder: nn.Module, centers: Tensor, proportions: Tensor, g: Tensor, params: list[Tensor],
                 recon: Callable[[Tensor, Tensor], Tensor], *, epsilon: float, weight: float, iters: int = 3,
                 trials: int = 16, continuation: tuple[float, ...] = (16.0, 4.0, 1.0), warmup: int = 2) -> None:
        self.autoencoder, self.centers, self.proportions, self.g = autoencoder, centers, proportions, g
        self.params = params
        self.recon, self.epsilon, self.weight = recon, epsilon, weight
        self.iters, self.trials, self.continuation, self.warmup = iters, trials, continuation, warmup
        self.x: Tensor | None = None  # the static batch
        self.out: dict[str, Tensor] = {}
        self.grads: list[Tensor | None] = []
        self.graph: torch.cuda.CUDAGraph | None = None
        self._side: torch.cuda.Stream | None = None
        self._eager_steps = 0

    def __call__(self, x: Tensor) -> dict[str, Tensor]:
        """One step on batch ``x`` (m, ...): fills ``self.grads`` (each parameter's gradient, also set on it) and
        returns the static outputs ``loss``, ``recon``, ``cluster``, ``z`` (m, p), ``nearest`` (m,),
        ``plan_moved``, ``sinkhorn_error`` (0-d tensors unless said), detached. Another batch shape starts over
        (eager warm-up, then a new capture)."""
        if self.x is None or self.x.shape != x.shape or self.x.device != x.device:
            self.x, self.out, self.graph, self._eager_steps = torch.empty_like(x), {}, None, 0
        self.x.copy_(x)
        if self.graph is not None:
            self.graph.replay()
        elif x.is_cuda and self._eager_steps >= self.warmup:
            self._capture()
            self.graph.replay()
        elif x.is_cuda:  # warm-up on a side stream, as torch.cuda.graph asks of what it captures
            self._side = self._side or torch.cuda.Stream()
            self._side.wait_stream(torch.cuda.current_stream())  # after the last optimizer step
            with torch.cuda.stream(self._side):
                self._step()
            torch.cuda.current_stream().wait_stream(self._side)
            self._eager_steps += 1
        else:
            self._step()
        self.attach_grads()
        return self.out

    def attach_grads(self) -> None:
        """Set the last step's gradients on the parameters again (``zero_grad(set_to_none=True)`` drops them; a
        replay writes the same buffers)."""
        for p, grad in zip(self.params, self.grads):
            p.grad = grad

    def _capture(self) -> None:
        # _step clears the gradients first, so the captured backward allocates them in the graph's memory, where
        # each replay writes them.
        previous = torch.backends.cuda.preferred_linalg_library()
        torch.backends.cuda.preferred_linalg_library("cusolver")  # MAGMA's Cholesky may synchronise; cuSOLVER's not
        try:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step()
        finally:
            torch.backends.cuda.preferred_linalg_library(previous)

    def _step(self) -> None:
        for p in self.params:  # eager: written, not added to the last step's gradient
            p.grad = None
        z, x_hat = self.autoencoder(self.x)
        recon = self.recon(self.x, x_hat)
        cost = squared_distances(z, self.centers)  # (m, K)
        with torch.no_grad():
            c = cost.detach().double()  # float64, as sinkhorn picks it at these costs
            w = self.proportions.to(c)
            a = torch.full((len(c),), 1.0 / len(c), dtype=c.dtype, device=c.device)
            log_plan, g = sync_free_solve(c, a, w, self.g.to(c), self.epsilon, self.iters, self.trials,
                                          continuation=self.continuation)
            self.g.copy_(g - (w * g).sum())
            plan = log_plan.exp()
            nearest = c.argmin(1)
            stats = {"nearest": nearest, "plan_moved": (plan.argmax(1) != nearest).float().mean(),
                     "sinkhorn_error": (plan.sum(0) - w).abs().sum()}
        cluster = _objective(plan, log_plan, cost, self.epsilon)
        loss = recon + self.weight * cluster
        loss.backward()
        self.grads = [p.grad for p in self.params]
        values = {"loss": loss, "recon": recon, "cluster": cluster, "z": z, **stats}
        if not self.out:
            self.out = {k: torch.empty_like(v, requires_grad=False) for k, v in values.items()}
        for k, v in values.items():
            self.out[k].copy_(v.detach())
