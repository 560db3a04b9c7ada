"""DeepClustering(cuda_graph=True): the replayable step (lit_otclust.graph_step) against the solved step. On a CPU it
runs eagerly, the same code a CUDA graph captures (tests/test_cuda.py captures it where a GPU is)."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch

from lit_otclust.callbacks import PhaseSwitch
from lit_otclust.data import MNISTDataModule
from lit_otclust.models import MLPAutoencoder
from lit_otclust.system import DeepClustering


def _pair(num_clusters: int = 4, **kwargs) -> tuple[DeepClustering, DeepClustering]:
    torch.manual_seed(0)
    solved = DeepClustering(MLPAutoencoder(), num_clusters=num_clusters, sinkhorn_tol=1e-10, **kwargs)
    solved.centers.data.normal_()
    solved.joint = True
    replayed = DeepClustering(MLPAutoencoder(), num_clusters=num_clusters, sinkhorn_tol=1e-10, cuda_graph=True,
                              **kwargs)
    replayed.load_state_dict(solved.state_dict())
    return solved, replayed


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_the_replayable_step_is_the_solved_steps_loss_gradient_and_potentials():
    """Lightning's order in a step: training_step, zero_grad (set_to_none), backward, optimizer step. The replayable
    step runs its backward inside training_step; its `backward` hook puts the gradients back after zero_grad."""
    solved, replayed = _pair(epsilon=0.1, clustering_weight=0.25)
    gen = torch.Generator().manual_seed(1)
    for step in range(3):  # the second and third from the last batch's g
        batch = (torch.rand(40, 784, generator=gen), torch.zeros(40, dtype=torch.long), torch.arange(40))
        losses = []
        for module in (solved, replayed):
            loss = module.training_step(batch, step)
            module.zero_grad(set_to_none=True)
            module.backward(loss)
            losses.append(loss)
        torch.testing.assert_close(losses[1].float(), losses[0].float(), rtol=1e-6, atol=0)
        for (name, p), q in zip(solved.named_parameters(), replayed.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7, msg=lambda m: f"{name}: {m}")
        torch.testing.assert_close(replayed.g_last, solved.g_last, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(replayed.g_avg, solved.g_avg, rtol=1e-5, atol=1e-6)


def _fit(data_dir, module, **trainer_kwargs):
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    trainer = L.Trainer(max_epochs=2, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        callbacks=[PhaseSwitch(pretrain_epochs=0, kmeans_n_init=1)], enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", deterministic=True, **trainer_kwargs)
    trainer.fit(module, datamodule=dm)
    return trainer


@pytest.mark.filterwarnings("ignore:epoch 0. 3 Sinkhorn solves did not reach tol")
def test_a_fit_with_cuda_graph_follows_the_solved_fit(data_dir):
    """Two epochs on the CPU from the same weights: Lightning's optimizer steps the replayable step's gradients as
    it steps the solved one's, so the two runs end at the same weights (to the sync-free solve's rounding)."""
    solved, replayed = _pair(10, epsilon=0.01, clustering_weight=1 / 300)
    start = copy.deepcopy(solved.state_dict())
    runs = [_fit(data_dir, module) for module in (solved, replayed)]
    assert runs[0].global_step == runs[1].global_step == 6
    assert not torch.equal(replayed.centers, start["centers"])  # the optimizer stepped
    for (name, p), q in zip(solved.named_parameters(), replayed.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    for key in ("train/loss", "train/cluster", "train/plan_moved"):
        torch.testing.assert_close(runs[1].callback_metrics[key], runs[0].callback_metrics[key], rtol=1e-4, atol=1e-6)
    assert float(runs[1].callback_metrics["train/sinkhorn_error"]) < 1e-5


def test_cuda_graph_refuses_what_it_cannot_replay(data_dir):
    with pytest.raises(ValueError, match=r"reg_m=1\.0 needs cuda_graph=False"):
        DeepClustering(MLPAutoencoder(), num_clusters=10, reg_m=1.0, cuda_graph=True)
    with pytest.raises(ValueError, match="clustering='soft_kmeans'"):
        DeepClustering(MLPAutoencoder(), num_clusters=10, clustering="soft_kmeans", cuda_graph=True)
    with pytest.raises(ValueError, match="a cluster of size 0"):
        DeepClustering(MLPAutoencoder(), num_clusters=2, proportions=[1.0, 0.0], cuda_graph=True)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, cuda_graph=True)
    with pytest.raises(ValueError, match="accumulate_grad_batches must be 1"):
        _fit(data_dir, module, accumulate_grad_batches=2)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_a_moved_module_gets_a_new_replayable_step():
    """A move to another device (here its stand-in: every tensor copied, as `module.to` replaces the buffers and
    the parameters' storage) leaves the old step pointing at the old tensors: the next step must use the new."""
    _, module = _pair(epsilon=0.1)
    def batch() -> tuple[torch.Tensor, ...]:
        return torch.rand(40, 784), torch.zeros(40, dtype=torch.long), torch.arange(40)

    module.training_step(batch(), 0)
    module._apply(lambda t: t.clone())
    before = module.g_last.clone()
    module.training_step(batch(), 1)  # another batch: another g
    assert module._graph_step.g is module.g_last and not torch.equal(module.g_last, before)
