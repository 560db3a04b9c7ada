"""The system: models, losses wiring, the phase switch, and k-means initialisation."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans

from lit_otclust.clustering import constrained_kmeans, kmeans
from lit_otclust.data import MNISTDataModule
from lit_otclust.models import ConvAutoencoder, MLPAutoencoder
from lit_otclust.losses import ClusteringLoss, OTLoss, SoftKMeans, ot_clustering_loss, soft_kmeans_loss
from lit_otclust.phases import PhaseSwitch
from lit_otclust.system import DeepClustering, adam


def test_autoencoders_reconstruct_the_input_shape():
    x = torch.randn(4, 784)
    z, x_hat = MLPAutoencoder()(x)
    assert z.shape == (4, 10) and x_hat.shape == x.shape
    conv = ConvAutoencoder(latent_dim=7)
    x = torch.randn(2, 3, 32, 32)
    z, x_hat = conv(x)
    assert z.shape == (2, 7) and x_hat.shape == x.shape
    # The paper's encoder: conv 32/64/128 with kernels 5/5/3, stride 2, then a linear layer.
    convs = [m for m in conv.encoder if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [(32, 5, 2), (64, 5, 2), (128, 3, 2)]


@pytest.mark.parametrize("model,shape", [(MLPAutoencoder(), (64, 784)), (ConvAutoencoder(), (16, 3, 32, 32))])
def test_the_reconstruction_goes_through_z_and_learns(model, shape):
    """x_hat depends on x only through z (a decoder ignoring z, or a skip around it, fails), and training lowers it."""
    torch.manual_seed(0)
    x = torch.rand(shape)
    z, x_hat = model(x)
    torch.testing.assert_close(model.decoder(z), x_hat)
    assert not torch.allclose(model.decoder(z + 1.0), x_hat)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(60):
        _, x_hat = model(x)
        loss = (x_hat - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("model", [MLPAutoencoder, ConvAutoencoder])
def test_glorot_init_is_tensorflows_default(model):
    """Glorot-uniform: every weight in [-b, b], b = sqrt(6 / (fan_in + fan_out)), variance b^2 / 3; biases zero.
    PyTorch's default (the other choice) has a bound 1/sqrt(fan_in) and nonzero biases, so it fails this."""
    torch.manual_seed(0)
    for init, expect in (("glorot", True), ("torch", False)):
        layers = [m for m in model(weight_init=init).modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d,
                                                                                  torch.nn.ConvTranspose2d))]
        assert len(layers) >= 4
        checks = []
        for m in layers:
            fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(m.weight)
            bound = (6 / (fan_in + fan_out)) ** 0.5
            var_ok = m.weight.numel() < 2000 or abs(m.weight.var().item() / (bound**2 / 3) - 1) < 0.1
            checks.append(m.weight.abs().max() <= bound and var_ok and not m.bias.any())
        assert all(checks) if expect else not any(checks)
    with pytest.raises(ValueError, match="weight_init"):
        model(weight_init="xavier")


@pytest.mark.parametrize("model,kwargs,shape", [(MLPAutoencoder, {"hidden_dims": [500, 500, 2000]}, (3, 784)),
                                                (ConvAutoencoder, {"latent_dim": 7}, (3, 3, 32, 32))])
def test_weights_load_a_lightning_checkpoint_or_a_state_dict_and_name_a_file_that_does_not_fit(model, kwargs, shape,
                                                                                            tmp_path):
    torch.manual_seed(0)
    trained = model(**kwargs)
    system = DeepClustering(trained, num_clusters=4, loss=OTLoss())
    torch.save({"state_dict": system.state_dict(), "epoch": 9}, tmp_path / "last.ckpt")  # as Lightning saves it
    torch.save(trained.state_dict(), tmp_path / "ae.pt")
    x = torch.rand(shape)
    for path in ("last.ckpt", "ae.pt"):
        torch.manual_seed(1)  # another initialisation, replaced by the file's weights
        loaded = model(**kwargs, weights=str(tmp_path / path))
        assert all(torch.equal(a, b) for a, b in zip(loaded(x), trained(x)))
    with pytest.raises(ValueError, match=r"`weights` .*last.ckpt does not fit"):
        model(weights=str(tmp_path / "last.ckpt"))  # the default architecture: other layer widths
    with pytest.raises(FileNotFoundError, match="`weights`: no file"):
        model(**kwargs, weights=str(tmp_path / "missing.ckpt"))


def test_relu_latent_is_the_linear_embedding_clipped_at_zero():
    """Same weights, both readings of the paper's "ReLU activation": z_relu = max(z_linear, 0), decoded as such."""
    torch.manual_seed(0)
    linear = MLPAutoencoder()
    relu = MLPAutoencoder(latent_activation="relu")
    relu.load_state_dict(linear.state_dict())
    x = torch.rand(64, 784)
    z_lin, _ = linear(x)
    z_relu, x_hat = relu(x)
    assert (z_lin < 0).any() and (z_lin > 0).any()
    torch.testing.assert_close(z_relu, z_lin.clamp_min(0))
    torch.testing.assert_close(x_hat, linear.decoder(z_lin.clamp_min(0)))
    with pytest.raises(ValueError, match="latent_activation"):
        MLPAutoencoder(latent_activation="tanh")


def test_bad_settings_name_themselves():
    with pytest.raises(ValueError, match="assignment"):
        DeepClustering(MLPAutoencoder(), assignment="nearest")
    with pytest.raises(ValueError, match="proportions"):
        DeepClustering(MLPAutoencoder(), num_clusters=3, proportions=[0.5, 0.5])
    with pytest.raises(ValueError, match="divisible"):
        ConvAutoencoder(input_shape=(3, 30, 30))
    with pytest.raises(ValueError, match="pretrain_epochs"):
        PhaseSwitch(pretrain_epochs=-1)


@pytest.mark.parametrize("loss", [OTLoss(0.1, solver="solve"), SoftKMeans(0.1)])
def test_clustering_loss_is_the_library_loss(loss):
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=loss)
    module.centers.data.normal_()
    z = torch.randn(50, 10)
    value, _ = module.loss(z, module.centers, module.proportions)
    w = torch.full((4,), 0.25)
    expected = (ot_clustering_loss(z, module.centers, w, epsilon=0.1, tol=1e-5)[0] if isinstance(loss, OTLoss)
                else soft_kmeans_loss(z, module.centers, epsilon=0.1))
    torch.testing.assert_close(value, expected)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_the_training_loss_weights_warm_starts_and_averages_as_documented():
    """lambda, the warm start from the last batch's g and the running average of g, against the library."""
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=OTLoss(0.1, solver="solve"), clustering_weight=0.25)
    module.centers.data.normal_()
    module.joint = True
    w = torch.full((4,), 0.25)
    gs = []
    for step in range(3):
        x = torch.rand(40, 784)
        z, x_hat = module.autoencoder(x)
        loss = module.training_step((x, torch.zeros(40, dtype=torch.long), torch.arange(40)), step)
        warm = gs[-1] if gs else None
        clust, res = ot_clustering_loss(z, module.centers, w, epsilon=0.1, g_init=warm, tol=module.loss.tol)
        recon = (x_hat - x).pow(2).sum(1).mean()
        torch.testing.assert_close(loss, recon + 0.25 * clust)
        torch.testing.assert_close(module.loss.g_last, res.g)
        gs.append(res.g)
    centred = [g - g.mean() for g in gs]
    torch.testing.assert_close(module.loss.g_avg, sum(centred) / 3)  # a running mean over the first batches
    assert int(module.loss.g_count) == 3


def test_a_loaded_state_dict_restores_the_phase_and_the_warm_start():
    """The step reads host copies of joint_phase and g_count > 0 (a GPU would stall on the buffers): loading a
    checkpoint's state dict must refresh them, so the resumed module warm-starts from its g_last like the original."""
    torch.manual_seed(0)
    trained = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=OTLoss(0.1, solver="solve"))
    trained.centers.data.normal_()
    trained.joint = True
    batch = (torch.rand(40, 784), torch.zeros(40, dtype=torch.long), torch.arange(40))
    trained.training_step(batch, 0)
    fresh = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=OTLoss(0.1, solver="solve"))
    assert not fresh.joint
    fresh.load_state_dict(trained.state_dict())
    assert fresh.joint
    loss = fresh.training_step(batch, 1)
    z, x_hat = fresh.autoencoder(batch[0])
    clust, _ = ot_clustering_loss(z, fresh.centers, torch.full((4,), 0.25), epsilon=0.1, g_init=trained.loss.g_last,
                                  tol=fresh.loss.tol)
    torch.testing.assert_close(loss, (x_hat - batch[0]).pow(2).sum(1).mean() + clust)
    fresh.load_state_dict(DeepClustering(MLPAutoencoder(), num_clusters=4, loss=OTLoss(0.1)).state_dict())
    assert not fresh.joint and not fresh.loss._warm


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_the_algorithm1_solver_runs_the_papers_sinkhorn_cold_every_batch():
    """solver='algorithm1': each batch's loss is the library's Algorithm 1 from b = 1 (no warm start from the
    previous batch), n_iter = max_iter, and its loose rows are not counted as unconverged."""
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, clustering_weight=0.25,
                            loss=OTLoss(0.1, solver="algorithm1", max_iter=5, gradient="unrolled"))
    module.centers.data.normal_()
    module.joint = True
    w = torch.full((4,), 0.25)
    for step in range(2):
        x = torch.rand(40, 784)
        z, x_hat = module.autoencoder(x)
        loss = module.training_step((x, torch.zeros(40, dtype=torch.long), torch.arange(40)), step)
        clust, res = ot_clustering_loss(z, module.centers, w, epsilon=0.1, gradient="unrolled", max_iter=5,
                                        solver="algorithm1")
        torch.testing.assert_close(loss, (x_hat - x).pow(2).sum(1).mean() + 0.25 * clust)
        torch.testing.assert_close(module.loss.g_last, res.g)
        assert not res.converged and module.loss._unconverged == 0
    assert module._train_sums["sinkhorn_iters"] == 10.0
    with pytest.raises(ValueError, match="algorithm1"):
        OTLoss(solver="algorithm1", reg_m=1.0)
    with pytest.raises(ValueError, match="solver"):
        OTLoss(solver="plain")


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_the_fixed_solver_warm_starts_from_the_last_batch_and_keeps_its_error_on_the_device():
    """solver='fixed': each batch's loss is the library's fixed solve of `iters` iterations from the previous
    batch's g; the error statistic stays a tensor (summed per epoch), nothing is counted as unconverged."""
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, clustering_weight=0.25,
                            loss=OTLoss(0.1, solver="fixed", iters=4))
    module.centers.data.normal_()
    module.joint = True
    w, warm = torch.full((4,), 0.25), None
    for step in range(3):
        x = torch.rand(40, 784)
        z, x_hat = module.autoencoder(x)
        loss = module.training_step((x, torch.zeros(40, dtype=torch.long), torch.arange(40)), step)
        clust, res = ot_clustering_loss(z, module.centers, w, epsilon=0.1, iters=4, g_init=warm, solver="fixed")
        torch.testing.assert_close(loss, (x_hat - x).pow(2).sum(1).mean() + 0.25 * clust)
        torch.testing.assert_close(module.loss.g_last, res.g)
        torch.testing.assert_close(res.plan.sum(0), w)  # exact cluster sizes after any number of iterations
        warm = res.g
    assert isinstance(module._train_sums["sinkhorn_error"], torch.Tensor) and module.loss._unconverged == 0
    assert module._train_sums["sinkhorn_iters"] == 12.0 and "sinkhorn_converged" not in module._train_sums
    with pytest.raises(ValueError, match="iters"):
        OTLoss(solver="fixed", iters=0)


def test_the_ot_loss_on_its_own_warm_starts_from_its_last_batch():
    """Outside a DeepClustering the loss binds its state to the centers it is given; the second call is warm."""
    gen = torch.Generator().manual_seed(0)
    z, centers, w = torch.randn(30, 2, generator=gen), torch.randn(3, 2, generator=gen), torch.full((3,), 1 / 3)
    loss_fn = OTLoss(0.5, solver="fixed", iters=3)
    first, _ = loss_fn(z, centers, w)
    second, _ = loss_fn(z, centers, w)
    torch.testing.assert_close(first, ot_clustering_loss(z, centers, w, epsilon=0.5, solver="fixed", iters=3)[0])
    g = ot_clustering_loss(z, centers, w, epsilon=0.5, solver="fixed", iters=3)[1].g
    torch.testing.assert_close(second, ot_clustering_loss(z, centers, w, epsilon=0.5, solver="fixed", iters=3,
                                                          g_init=g)[0])
    assert int(loss_fn.g_count) == 2


def test_the_soft_kmeans_form_picks_dkms_expected_distance():
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=SoftKMeans(0.1, form="expected"))
    module.centers.data.normal_()
    z = torch.randn(50, 10)
    value = module.loss(z, module.centers, module.proportions)[0]
    torch.testing.assert_close(value, soft_kmeans_loss(z, module.centers, epsilon=0.1, form="expected"))
    assert not torch.isclose(value, soft_kmeans_loss(z, module.centers, epsilon=0.1))
    with pytest.raises(ValueError, match="form"):
        SoftKMeans(form="dkm")


def test_potential_assignment_shifts_by_g():
    module = DeepClustering(MLPAutoencoder(latent_dim=1), num_clusters=2, loss=OTLoss())
    module.centers.data = torch.tensor([[0.0], [1.0]])
    z = torch.tensor([[0.4], [0.6]])
    assert module.assign(z, "distance").tolist() == [0, 1]
    module.loss.g_avg.copy_(torch.tensor([0.5, 0.0]))  # cluster 0 made cheaper by 0.5
    assert module.assign(z, "potential").tolist() == [0, 0]
    # A loss without a potential (soft k-means, none): the potential rule is the distance rule.
    assert DeepClustering(MLPAutoencoder(latent_dim=1), num_clusters=2, loss=SoftKMeans()).assign(z, "potential").tolist() == [0, 0]


def test_kmeans_init_matches_sklearn_on_the_embeddings(data_dir, tmp_path):
    """PhaseSwitch's centers are sklearn's k-means++ on f(x) of every fitted sample (a second code path)."""
    L.seed_everything(0)
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=500, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    switch = PhaseSwitch(pretrain_epochs=0, kmeans_n_init=2, seed=3)
    trainer = L.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                        enable_checkpointing=False, callbacks=[switch], enable_progress_bar=False,
                        enable_model_summary=False)
    dm.setup("fit")
    with torch.no_grad():
        z0 = module.autoencoder.encoder(dm.fit_set.x).double().numpy()  # the untrained encoder
    km = KMeans(10, n_init=2, random_state=3).fit(z0)
    trainer.fit(module, datamodule=dm)
    assert switch.phase == "joint" and switch.switch_epoch == 0
    # One Adam step (lr 1e-3) moved the centers after initialisation; compare before that step
    # by undoing nothing: the step is at most lr per coordinate.
    np.testing.assert_allclose(module.centers.detach().numpy(), km.cluster_centers_, atol=1.5e-3)


def test_centers_do_not_move_while_pretraining(data_dir):
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    module.centers.data.normal_()
    before = module.centers.detach().clone()
    enc_before = module.autoencoder.encoder[1][0].weight.detach().clone()
    # Two epochs of 3 batches, stopped by max_steps inside the 3 pre-training epochs.
    trainer = L.Trainer(max_epochs=4, max_steps=6, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        callbacks=[PhaseSwitch(pretrain_epochs=3)], enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, datamodule=dm)
    assert not module.joint
    torch.testing.assert_close(module.centers.detach(), before, rtol=0, atol=0)
    assert not torch.equal(module.autoencoder.encoder[1][0].weight, enc_before)


def test_switch_restarts_the_centers_adam_state_and_the_step_decay(data_dir):
    """At the switch the centers get a fresh Adam state and the step decay counts joint epochs only."""
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"),
                            lr_scheduler=partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5))
    trainer = L.Trainer(max_epochs=3, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        callbacks=[PhaseSwitch(pretrain_epochs=2, kmeans_n_init=1)], enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, datamodule=dm)
    opt = trainer.optimizers[0]
    # 3 batches an epoch: the encoder took 9 Adam steps, the centers only the 3 of the joint epoch.
    assert opt.state[module.autoencoder.encoder[1][0].weight]["step"].item() == 9
    assert opt.state[module.centers]["step"].item() == 3
    # The joint epoch ran at the initial lr (the schedule was restarted), then one decay step.
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5e-3)
    assert opt.param_groups[1]["lr"] == pytest.approx(0.5e-3)  # the centers decayed alike


@pytest.mark.parametrize("kwargs,match", [
    ({"proportions": [0.5, 0.6, -0.1]}, "proportions"),
    ({"proportions": [0.5, 0.4, 0.2]}, "sum to 1"),
    ({"proportions": [float("nan"), 0.5, 0.5]}, "proportions"),
    ({"num_clusters": 1, "proportions": None}, "num_clusters"),
])
def test_settings_are_checked_when_the_module_is_built(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DeepClustering(MLPAutoencoder(), **{"num_clusters": 3, **kwargs})


@pytest.mark.parametrize("make,match", [
    (lambda: OTLoss(epsilon=0.0), "epsilon"), (lambda: OTLoss(reg_m=-1.0), "reg_m"),
    (lambda: OTLoss(gradient="backprop"), "gradient"), (lambda: OTLoss(max_iter=0), "max_iter"),
    (lambda: SoftKMeans(epsilon=float("nan")), "epsilon"),
])
def test_each_loss_checks_its_own_settings(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_zero_proportion_keeps_the_potential_average_finite_elsewhere():
    """w_k = 0: cluster k takes no mass, its g stays -inf (never chosen by the potential rule), no NaN."""
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(latent_dim=2), num_clusters=3, proportions=[0.5, 0.5, 0.0],
                            loss=OTLoss(0.1, solver="solve"))
    module.centers.data = torch.tensor([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    z = torch.randn(60, 2) + torch.tensor([1.5, 1.5])
    for _ in range(3):
        module.loss(z, module.centers, module.proportions)
    g_avg = module.loss.g_avg
    assert torch.isfinite(g_avg[:2]).all() and g_avg[2].item() == float("-inf")
    assert g_avg[:2].sum().abs().item() < 1e-5  # the gauge: mean zero over the live clusters
    assert (module.assign(z, "potential") != 2).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_gradient_stops_the_step_and_names_the_parameter(bad):
    """The check before Adam's step: a finite loss can still give a NaN/inf gradient (an overflow in backward);
    it must stop before the step writes it into the weights, naming the parameter. Finite gradients pass,
    large ones included (a sum of squares overflows float32 from 1e19, a plain sum from 3e38)."""
    module = DeepClustering(MLPAutoencoder(latent_dim=2), num_clusters=3, loss=OTLoss(solver="solve"))
    optimizer = module.configure_optimizers()["optimizer"]
    for big in (1e20, 3e38):
        for p in module.parameters():
            p.grad = torch.full_like(p, big)
        module.on_before_optimizer_step(optimizer)  # finite: nothing raised
    for name, p in module.named_parameters():  # every tensor the optimizer writes is checked, centers to decoder
        saved = p.grad.clone()
        p.grad.view(-1)[-1] = bad
        with pytest.raises(FloatingPointError, match=rf"gradient of {name} is not finite"):
            module.on_before_optimizer_step(optimizer)
        p.grad = saved


def _tiny_fit(data_dir, module, switch, **trainer_kwargs):
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    trainer = L.Trainer(limit_val_batches=0, logger=False, enable_checkpointing=False, callbacks=[switch],
                        enable_progress_bar=False, enable_model_summary=False, **trainer_kwargs)
    return trainer, dm


def test_phase_settings_are_checked_before_the_first_step(data_dir):
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    trainer, dm = _tiny_fit(data_dir, module, PhaseSwitch(pretrain_epochs=3), max_epochs=3)
    with pytest.raises(ValueError, match="pretrain_epochs"):
        trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 0
    many = DeepClustering(MLPAutoencoder(), num_clusters=200, loss=OTLoss(solver="solve"))
    trainer, dm = _tiny_fit(data_dir, many, PhaseSwitch(pretrain_epochs=0), max_epochs=1)
    with pytest.raises(ValueError, match="batch_size"):
        trainer.fit(many, datamodule=dm)
    trainer, dm = _tiny_fit(data_dir, module, PhaseSwitch(pretrain_epochs=0), max_epochs=1)
    dm.setup("fit")
    with pytest.raises(ValueError, match="fit_set"):
        trainer.fit(module, train_dataloaders=dm.train_dataloader())


def test_a_checkpoint_of_another_config_names_the_setting(data_dir, tmp_path):
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    trainer, dm = _tiny_fit(data_dir, module, PhaseSwitch(pretrain_epochs=0, kmeans_n_init=1), max_epochs=1)
    trainer.fit(module, datamodule=dm)
    trainer.save_checkpoint(tmp_path / "k10.ckpt")
    for other, match in ((DeepClustering(MLPAutoencoder(), num_clusters=5, loss=OTLoss(solver="solve")), "num_clusters"),
                         (DeepClustering(MLPAutoencoder(latent_dim=4), num_clusters=10, loss=OTLoss(solver="solve")), "latent_dim"),
                         (DeepClustering(MLPAutoencoder(hidden_dims=(400, 250)), num_clusters=10, loss=OTLoss(solver="solve")),
                          "autoencoder")):
        trainer, dm = _tiny_fit(data_dir, other, PhaseSwitch(), max_epochs=1)
        with pytest.raises(ValueError, match=match):
            trainer.validate(other, datamodule=dm, ckpt_path=tmp_path / "k10.ckpt", verbose=False, weights_only=False)


def test_ae_kmeans_is_scored_by_sklearn_kmeans_and_validation_writes_nothing(data_dir):
    """The AE + k-means baseline's val/acc is sklearn's k-means of the embeddings, Hungarian-matched
    (a second code path), and a later ``validate`` (as from a checkpoint) leaves every tensor as it was."""
    from lit_otclust.metrics import hungarian_accuracy

    L.seed_everything(0)
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=500, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=None)
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[PhaseSwitch(pretrain_epochs=0, kmeans_n_init=2, seed=3)])
    trainer.fit(module, datamodule=dm)
    with torch.no_grad():
        z = module.autoencoder.encoder(dm.fit_set.x).double().numpy()
    pred = torch.as_tensor(KMeans(10, n_init=2, random_state=3).fit_predict(z))
    expected = hungarian_accuracy(pred, dm.fit_set.y, 10, 10)["acc"]
    assert float(trainer.callback_metrics["val/acc"]) == pytest.approx(float(expected), abs=1e-6)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    module.centers.data.add_(1.0)  # centers a fit's k-means would replace: validate must keep them
    before["centers"] += 1.0
    trainer.validate(module, datamodule=dm, verbose=False)
    for name, value in module.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_unconverged_solves_are_counted_per_epoch_and_warned_about_once_per_run(data_dir):
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve", max_iter=2, tol=1e-12))
    trainer, dm = _tiny_fit(data_dir, module, PhaseSwitch(pretrain_epochs=0, kmeans_n_init=1), max_epochs=2)
    with pytest.warns(RuntimeWarning, match="did not reach tol") as record:
        trainer.fit(module, datamodule=dm)
    assert len([w for w in record if "did not reach tol" in str(w.message)]) == 1
    # 300 samples in batches of 100: every one of the 3 solves of the last epoch stopped at 2 iterations.
    assert float(trainer.callback_metrics["train/sinkhorn_unconverged"]) == 3.0
    assert float(trainer.callback_metrics["train/sinkhorn_converged"]) == 0.0


class _CentersAtEpochStart(L.Callback):
    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.seen.append(pl_module.centers.detach().clone())


def test_kmeans_at_start_is_the_literal_algorithm_centers_of_the_untrained_encoder_kept(data_dir):
    """kmeans_at="start": k-means on the untrained encoder before the first step (sklearn, a second code
    path), then the same centers through pre-training and at the switch; "switch" refits them there."""
    L.seed_everything(0)
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    dm.setup("fit")
    with torch.no_grad():
        z0 = module.autoencoder.encoder(dm.fit_set.x).double().numpy()
    km = KMeans(10, n_init=1, random_state=0).fit(z0)
    seen = _CentersAtEpochStart()
    trainer = L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[PhaseSwitch(pretrain_epochs=2, kmeans_n_init=1, seed=0, kmeans_at="start"), seen])
    trainer.fit(module, datamodule=dm)
    np.testing.assert_allclose(seen.seen[0].numpy(), km.cluster_centers_, atol=1e-5)
    assert torch.equal(seen.seen[1], seen.seen[0]) and torch.equal(seen.seen[2], seen.seen[0])  # kept, evaluated as is
    L.seed_everything(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    seen = _CentersAtEpochStart()
    trainer = L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[PhaseSwitch(pretrain_epochs=2, kmeans_n_init=1, seed=0), seen])
    trainer.fit(module, datamodule=dm)
    assert not torch.equal(seen.seen[2], seen.seen[1])  # "switch": refitted on the pre-trained embedding


def test_train_acc_is_the_evaluation_accuracy_when_nothing_moves(data_dir):
    """``train/acc`` pools each step's assignments; with lr = 0 the weights and centers stay put, so it
    must equal the evaluation's ``val/acc`` on the same (fitted) images, a second code path."""
    L.seed_everything(0)
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"),
                            optimizer=partial(adam, lr=0.0))
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[PhaseSwitch(pretrain_epochs=1, kmeans_n_init=1)])
    trainer.fit(module, datamodule=dm)
    metrics = trainer.callback_metrics
    assert 0.1 < float(metrics["val/acc"]) < 1.0
    for name in ("acc", "nmi", "ari"):
        assert float(metrics[f"train/{name}"]) == pytest.approx(float(metrics[f"val/{name}"]), abs=1e-6), name


@pytest.mark.parametrize("init_seed", [0, 1])
def test_center_init_uniform_draws_dkm_centers_at_the_switch_whatever_the_embedding(data_dir, init_seed):
    """center_init="uniform": at the switch mu ~ U[-1, 1]^p seeded by phases.seed alone (two different networks
    get the same centers); the pre-training evaluation before it still scored k-means centers."""
    L.seed_everything(init_seed)
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"),
                            optimizer=partial(adam, lr=0.0))  # lr 0: the centers stay as drawn
    seen = _CentersAtEpochStart()  # before PhaseSwitch in the list: sees the centers the last evaluation left
    trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0,
                        callbacks=[seen, PhaseSwitch(pretrain_epochs=1, kmeans_n_init=1, seed=3, center_init="uniform")])
    trainer.fit(module, datamodule=dm)
    expected = 2 * torch.rand(10, 10, generator=torch.Generator().manual_seed(3)) - 1
    torch.testing.assert_close(module.centers.detach(), expected, rtol=0, atol=0)
    with torch.no_grad():
        z = module.autoencoder.encoder(dm.fit_set.x).double().numpy()
    km = KMeans(10, n_init=1, random_state=3).fit(z)  # the evaluation of epoch 0 (lr 0: the same embedding)
    np.testing.assert_allclose(np.sort(seen.seen[1].numpy(), 0), np.sort(km.cluster_centers_, 0), atol=1e-4)
    with pytest.raises(ValueError, match="center_init"):
        PhaseSwitch(center_init="random")


def _fit_at_lr_0(data_dir: Path, switch: PhaseSwitch, w: list[float], max_epochs: int,
                 loss: ClusteringLoss | None = None) -> tuple[DeepClustering, torch.Tensor, L.Trainer]:
    """A fit under w of 400 images of digits 0-3 at learning rate 0, seeded, so the final embedding is the one the
    switch and every refit saw: the module, that embedding (400, p) and the trainer. The loss: OT solved to
    tolerance unless given."""
    L.seed_everything(0)
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", classes=[0, 1, 2, 3], subset=400,
                         batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=loss or OTLoss(solver="solve"), proportions=w,
                            optimizer=partial(adam, lr=0.0))
    trainer = L.Trainer(max_epochs=max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0, callbacks=[switch])
    trainer.fit(module, datamodule=dm)
    with torch.no_grad():
        return module, module.embed(dm.fit_set.x), trainer


@pytest.mark.parametrize("center_init", ["constrained", None])
def test_center_init_constrained_puts_each_share_where_constrained_kmeans_does(data_dir, center_init):
    """center_init="constrained", and the default under a non-uniform w: at the switch mu is size-constrained k-means
    of the pre-trained embedding with the model's proportions, center k carrying w_k, as constrained_kmeans computes
    it on that embedding (lr 0: the embedding the switch saw); its nearest-center sizes follow w's order. No refit
    (refit_epochs=[]), so the centers are the switch's."""
    w = [0.4, 0.1, 0.3, 0.2]
    switch = PhaseSwitch(pretrain_epochs=1, kmeans_n_init=4, seed=3, center_init=center_init, refit_epochs=[])
    module, z, _ = _fit_at_lr_0(data_dir, switch, w, max_epochs=2)
    centers, g, labels = constrained_kmeans(z, torch.tensor(w), n_init=4, seed=3)
    torch.testing.assert_close(module.centers.detach(), centers, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.bincount(labels.numpy(), minlength=4), np.round(np.array(w) * 400).astype(int))
    assert not torch.allclose(centers, kmeans(z, 4, 4, 3), atol=1e-3)  # k-means' start would be another


def test_center_init_defaults_to_kmeans_where_w_is_uniform_or_unconstrained(data_dir):
    """The default under a uniform w, and under a w that the loss does not constrain (soft k-means): k-means of the
    pre-trained embedding (sklearn's, the same restarts and seed)."""
    for loss, w in ((OTLoss(solver="solve"), [0.25] * 4), (SoftKMeans(), [0.4, 0.1, 0.3, 0.2])):
        switch = PhaseSwitch(pretrain_epochs=1, kmeans_n_init=4, seed=3)
        module, z, _ = _fit_at_lr_0(data_dir, switch, w, max_epochs=2, loss=loss)
        km = KMeans(4, n_init=4, random_state=3).fit(z.double().numpy())
        np.testing.assert_allclose(np.sort(module.centers.detach().double().numpy(), 0),
                                   np.sort(km.cluster_centers_, 0), atol=1e-4)


def test_refit_epochs_fit_the_centers_again_by_size_constrained_kmeans_once(data_dir):
    """refit_epochs=[1]: at the start of the second joint epoch mu is size-constrained k-means of the current
    embedding (lr 0: the embedding the refit saw), whatever the switch's k-means gave; the refit is recorded in the
    callback's state, so a run resumed within that epoch does not refit again; and negative epochs are refused."""
    w = [0.4, 0.1, 0.3, 0.2]
    switch = PhaseSwitch(pretrain_epochs=1, kmeans_n_init=4, seed=3, refit_epochs=[1])
    module, z, trainer = _fit_at_lr_0(data_dir, switch, w, max_epochs=3)
    centers, _, _ = constrained_kmeans(z, torch.tensor(w), n_init=4, seed=3)
    torch.testing.assert_close(module.centers.detach(), centers, rtol=0, atol=1e-6)
    assert not torch.allclose(centers, kmeans(z, 4, 4, 3), atol=1e-3)  # the switch's start was another
    assert switch.state_dict()["refitted"] == [2]
    resumed = PhaseSwitch(pretrain_epochs=1, refit_epochs=[1])
    resumed.load_state_dict(switch.state_dict())
    assert resumed.refitted == [2]
    with pytest.raises(ValueError, match="refit_epochs"):
        PhaseSwitch(refit_epochs=[-1])
    # the default: the last joint epoch where the loss holds the sizes to a non-uniform w, else none
    default, never = PhaseSwitch(pretrain_epochs=1), PhaseSwitch(pretrain_epochs=1, refit_epochs=[])
    default.switch_epoch = never.switch_epoch = 1
    uniform = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=OTLoss())
    soft = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=SoftKMeans(), proportions=w)
    assert default.refits(trainer, module) == [1] and never.refits(trainer, module) == []
    assert default.refits(trainer, uniform) == [] and default.refits(trainer, soft) == []


def test_refit_every_adds_the_periodic_refits_to_refit_epochs_and_to_the_default(data_dir):
    """refit_every=n: joint epochs n-1, 2n-1, ... start with a refit, beside refit_epochs or its default; in a fit with
    lr 0, refit_every=1 refits at both joint epochs and leaves mu at size-constrained k-means of the embedding."""
    L.seed_everything(0)
    w = [0.4, 0.1, 0.3, 0.2]
    module = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=OTLoss(), proportions=w)
    uniform = DeepClustering(MLPAutoencoder(), num_clusters=4, loss=OTLoss())
    trainer = L.Trainer(max_epochs=101, logger=False)  # joint epochs 0-99 after a switch at epoch 1
    every, pinned = PhaseSwitch(pretrain_epochs=1, refit_every=25), PhaseSwitch(refit_every=30, refit_epochs=[5])
    every.switch_epoch = pinned.switch_epoch = 1
    assert every.refits(trainer, module) == [24, 49, 74, 99]  # the default's last epoch is one of them
    assert every.refits(trainer, uniform) == [24, 49, 74, 99]  # no default refit under a uniform w
    assert pinned.refits(trainer, module) == [5, 29, 59, 89]
    assert PhaseSwitch(refit_every=25).refits(trainer, DeepClustering(MLPAutoencoder(), num_clusters=4)) == []
    with pytest.raises(ValueError, match="refit_every"):
        PhaseSwitch(refit_every=-1)
    switch = PhaseSwitch(pretrain_epochs=1, kmeans_n_init=4, seed=3, refit_every=1)
    module, z, _ = _fit_at_lr_0(data_dir, switch, w, max_epochs=3)
    assert switch.refitted == [1, 2]
    centers, _, _ = constrained_kmeans(z, torch.tensor(w), n_init=4, seed=3)
    torch.testing.assert_close(module.centers.detach(), centers, rtol=0, atol=1e-6)


def test_the_scores_do_not_depend_on_the_evaluation_batch_size(data_dir):
    """The evaluation batch is a speed setting only (its default is the data set's fastest measured,
    python -m benchmarks.bench_data --eval-sizes): the default, an odd size and one batch of everything give the
    same scores, held-out included."""
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    results = []
    for size in (None, 37, 10_000):
        dm = MNISTDataModule(data_dir=str(data_dir), download=False, subset=1000, eval_batch_size=size)
        assert dm.eval_batch_size == (MNISTDataModule.default_eval_batch_size if size is None else size)
        dm.setup("validate")
        with torch.no_grad():  # centers on 10 samples' embeddings, so the clusters are not all one
            module.centers.copy_(module.embed(dm.fit_set.x[:: len(dm.fit_set) // 10][:10]))
        trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False)
        results.append(trainer.validate(module, datamodule=dm, verbose=False)[0])
    assert 0.15 < results[0]["val/acc"] < 1.0 and "heldout/acc" in results[0]
    for other in results[1:]:
        assert other.keys() == results[0].keys()
        for key, value in results[0].items():
            assert other[key] == pytest.approx(value, abs=1e-6), key


def test_sgd_is_momentum_sgd_on_every_parameter():
    """``optimizer=SGD``: three steps of the configured optimizer move every weight as momentum SGD written out
    (v <- m v + g, p <- p - lr v), the centers included; Adam's update (the default) would fail this."""
    torch.manual_seed(0)
    module = DeepClustering(MLPAutoencoder(hidden_dims=(32,), latent_dim=4), num_clusters=3,
                            optimizer=partial(torch.optim.SGD, lr=0.05, momentum=0.8))
    params = list(module.autoencoder.parameters()) + [module.centers]
    expect = [p.detach().clone() for p in params]
    velocity = [torch.zeros_like(p) for p in params]
    opt = module.configure_optimizers()["optimizer"]
    for step in range(3):
        x = torch.rand(8, 784)
        z, x_hat = module.autoencoder(x)
        loss = module.reconstruction_loss(x, x_hat) + (z[:, None] - module.centers).pow(2).sum()  # grads to all
        opt.zero_grad()
        loss.backward()
        for i, p in enumerate(params):
            velocity[i] = 0.8 * velocity[i] + p.grad if step else p.grad.clone()
            expect[i] -= 0.05 * velocity[i]
        opt.step()
        for p, e in zip(params, expect):
            torch.testing.assert_close(p.detach(), e)



def test_ae_with_constrained_center_init_is_scored_by_size_constrained_kmeans_with_w(data_dir):
    """AE + size-constrained k-means (``loss=None``, ``center_init="constrained"``): every evaluation of a fit fits the
    centers by :func:`constrained_kmeans` with the model's w on the embeddings (that function called directly, the
    second path), not by k-means, and the nearest-center sizes follow w more closely than k-means'."""
    L.seed_everything(0)
    w = [0.4, 0.25, 0.15, 0.1, 0.05, 0.02, 0.01, 0.01, 0.005, 0.005]
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=500, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=None, proportions=w)
    switch = PhaseSwitch(pretrain_epochs=0, kmeans_n_init=2, seed=3, center_init="constrained")
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, callbacks=[switch])
    trainer.fit(module, datamodule=dm)
    with torch.no_grad():
        z = module.embed(dm.fit_set.x)
    expected, _, _ = constrained_kmeans(z, module.proportions, 2, 3)
    torch.testing.assert_close(module.centers.detach(), expected.to(module.centers))
    plain = kmeans(z, 10, 2, 3)
    assert not torch.allclose(torch.sort(plain.sum(1)).values, torch.sort(expected.sum(1)).values, atol=1e-3)


def test_the_joint_phase_warms_its_learning_rates_up_linearly_and_resumes_the_ramp(data_dir):
    """``warmup_steps``: pre-training at the full lr, then the joint phase's k-th step at k / warmup_steps of it, then
    the full lr; the ramp's state survives a checkpoint (state_dict round trip)."""
    seen: list[tuple[bool, float, float]] = []

    class Record(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            seen.append((pl_module.joint, optimizer.param_groups[0]["lr"], optimizer.param_groups[1]["lr"]))

    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=300, batch_size=100)
    module = DeepClustering(MLPAutoencoder(), num_clusters=10, loss=OTLoss(solver="solve"))
    switch = PhaseSwitch(pretrain_epochs=1, kmeans_n_init=1, warmup_steps=4)
    trainer = L.Trainer(max_epochs=3, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        callbacks=[switch, Record()], enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, datamodule=dm)
    lr = 1e-3
    expected = [(False, lr)] * 3 + [(True, lr * k / 4) for k in (1, 2, 3, 4)] + [(True, lr)] * 2
    assert [(joint, a) for joint, a, _ in seen] == [(j, pytest.approx(v)) for j, v in expected]
    assert all(a == pytest.approx(b) for _, a, b in seen)  # the centers' group ramps alike
    assert switch.warmup is None  # done
    other = PhaseSwitch(warmup_steps=4)
    other.load_state_dict({**switch.state_dict(), "warmup": (3, [lr, lr])})
    assert other.warmup == (3, [lr, lr])
    with pytest.raises(ValueError, match="warmup_steps"):
        PhaseSwitch(warmup_steps=-1)
