"""``model.compile``: the compiled training step computes what the eager one does, and checkpoints keep their keys."""

from __future__ import annotations

import pytest
import torch

from lit_otclust.losses import OTLoss, ot_clustering_loss
from lit_otclust.models import MLPAutoencoder
from lit_otclust.system import DeepClustering


def _module(compile, solver: str = "fixed") -> DeepClustering:
    torch.manual_seed(0)
    model = DeepClustering(MLPAutoencoder(input_shape=(64,), hidden_dims=(32,), latent_dim=4), num_clusters=3,
                           loss=OTLoss(solver=solver, iters=5), clustering_weight=0.1, compile=compile)
    model.configure_model()
    model.joint = True
    with torch.no_grad():
        model.centers.copy_(torch.randn(3, 4))
    return model


def _train(model: DeepClustering, steps: int = 3) -> tuple[list[float], dict[str, torch.Tensor]]:
    """``steps`` training steps on seeded batches, Adam as the system configures it: each loss and the end state."""
    opt = model.configure_optimizers()["optimizer"]
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.rand(60, 64, generator=gen), torch.randint(0, 3, (60,), generator=gen)
        loss = model.training_step((x, y, torch.arange(60)), 0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_compile_keeps_the_state_dict_keys_compiles_once_and_refuses_unknown_modes():
    eager, compiled = _module(False), _module("default")
    assert compiled.state_dict().keys() == eager.state_dict().keys()  # checkpoints load either way
    assert eager.loss._value is ot_clustering_loss and compiled.loss._value is not ot_clustering_loss
    loss_fn = compiled.loss._value
    compiled.configure_model()  # Lightning calls it again at validate, test and predict
    assert compiled.loss._value is loss_fn
    # The solve to tolerance reads the host as it iterates: only the autoencoder is compiled.
    assert _module("default", solver="solve").loss._value is ot_clustering_loss
    with pytest.raises(ValueError, match="compile must be"):
        DeepClustering(MLPAutoencoder(), compile="max-autotune")


@pytest.mark.parametrize("gradient", ["envelope", "unrolled"])
def test_the_fixed_solve_loss_traces_as_one_graph_and_equals_eager(gradient):
    # Dynamo alone (backend="eager": no kernels built), fullgraph: a graph break or a failed trace raises. Torch
    # 2.11's dynamo failed here on returning a SinkhornResult made by NamedTuple._replace.
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    z0, centers = torch.randn(40, 4, generator=gen), torch.randn(3, 4, generator=gen)
    w, g = torch.tensor([0.2, 0.3, 0.5]), torch.zeros(3)
    traced = torch.compile(ot_clustering_loss, backend="eager", fullgraph=True)
    out = {}
    for name, fn in (("eager", ot_clustering_loss), ("traced", traced)):
        z = z0.clone().requires_grad_(True)
        loss, res = fn(z, centers, w, epsilon=0.5, gradient=gradient, solver="fixed", iters=10,
                       g_init=g)
        loss.backward()
        out[name] = (loss.detach(), z.grad, res.plan, res.g, res.n_iter)
        assert not res.plan.requires_grad and not res.g.requires_grad
    for a, b in zip(out["traced"], out["eager"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # inductor builds C++ kernels: tens of seconds on a CPU
def test_the_compiled_training_step_equals_the_eager_one():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager_losses, eager_state = _train(_module(False))
    compiled_losses, compiled_state = _train(_module("default"))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2  # the autoencoder and the loss, compiled
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-5)
    for name, value in eager_state.items():
        torch.testing.assert_close(compiled_state[name], value, rtol=1e-4, atol=1e-5, msg=name)
