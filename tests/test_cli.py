"""End to end through the CLI: fit, the phase switch, resume, validate/test/predict, W&B offline."""

from __future__ import annotations

import csv
import io
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger, WandbLogger
import numpy as np
import pytest
import torch
import wandb
import yaml
from scipy.optimize import linear_sum_assignment

from lit_otclust.__main__ import cores_oversubscribed
from lit_otclust.cli import EPOCH_END_ONLY, OTClusterCLI, main
from lit_otclust.data import MNISTDataModule
from lit_otclust.losses import OTLoss, SoftKMeans
from lit_otclust.models import MLPAutoencoder
from lit_otclust.phases import PhaseSwitch
from lit_otclust.startup import wandb_credentials_found
from lit_otclust.system import DeepClustering
from lit_otclust.wandb_run import default_loggers
from _runs import REPO, SMOKE, epoch_metrics

def fit(data_dir, root, *extra):
    cli = main(["fit", "--config", SMOKE, "--data.data_dir", str(data_dir),
                "--trainer.default_root_dir", str(root), *extra])
    wandb.finish()  # in one process, the next WandbLogger would otherwise reuse this run
    return cli


def test_console_script_exits_zero_after_a_run(data_dir, tmp_path):
    """`lit-otclust`, the script `pip install` writes (README's set-up installs the checkout): a finished run
    exits 0 and prints nothing of its own (a script returning main()'s CLI object exited 1 and printed it)."""
    script = Path(sys.executable).with_name("lit-otclust")
    assert script.exists(), f"no {script}: install the checkout as README's set-up does (pip install ... -e .)"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    cmd = [str(script), "validate", "--config", SMOKE, "--data.data_dir", str(data_dir),
           "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OTClusterCLI" not in proc.stdout + proc.stderr
    assert "val/acc" in proc.stdout  # the validation ran and printed its table


def test_an_empty_wandb_mode_without_credentials_logs_offline(tmp_path, monkeypatch):
    """`WANDB_MODE= lit-otclust fit ...`: W&B itself rejects an empty mode with a validation traceback; the CLI reads
    it as unset, so without credentials the run logs offline (and never prompts)."""
    monkeypatch.setenv("WANDB_MODE", "")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc credentials either
    assert not wandb_credentials_found()
    loggers = default_loggers(tmp_path, "run")
    assert os.environ["WANDB_MODE"] == "offline"
    assert any(isinstance(lg, WandbLogger) for lg in loggers)


@pytest.mark.parametrize("load, cores, threads, busy", [
    (0.9, 2, 2, False),   # idle but for this process's own imports
    (1.4, 2, 2, False),   # a little other work: within the half-core margin
    (2.8, 2, 2, True),    # two other runs on the two cores (this project's sweep): the measured 4x slowdown
    (3.0, 2, 1, False),   # one thread never waits on another
    (59.0, 64, 4, False),  # a busy cluster node with room for this run's 4 threads
    (62.0, 64, 4, True),
])
def test_the_cores_count_as_oversubscribed_when_other_work_and_the_threads_exceed_them(load, cores, threads, busy):
    assert cores_oversubscribed(load, cores, threads) is busy


@pytest.mark.parametrize("argv, warned", [(["fit", "--config", "c.yaml"], True), (["--help"], False),
                                          (["fit", "--help"], False)])
def test_busy_cores_are_one_line_on_stderr_and_never_before_the_help(argv, warned, monkeypatch, capsys):
    """Two other runs on the 2 cores and torch at 2 threads: a fit is told once, in one line without a source line;
    ``--help`` prints only the help."""
    import lit_otclust.__main__ as cli

    for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "LOCAL_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli.os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(cli.torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(cli, "main", lambda: None)  # the check, not a fit
    monkeypatch.setattr(cli.sys, "argv", ["lit-otclust", *argv])
    cli.console()
    err = capsys.readouterr().err
    assert ("load average is 3.0" in err) is warned
    if warned:
        assert err.count("\n") == 1 and err.startswith("lit_otclust: warning:") and "RuntimeWarning" not in err




def test_module_entry_point_fits_logs_and_switches_phase(data_dir, tmp_path):
    """`python -m lit_otclust fit --config configs/smoke.yaml` as a user runs it."""
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    env.pop("WANDB_SILENT", None)
    cmd = [sys.executable, "-m", "lit_otclust", "fit", "--config", SMOKE, "--data.data_dir", str(data_dir),
           "--trainer.default_root_dir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The console carries the run, not third-party notices the user cannot act on (each printed before the fix).
    console = proc.stdout + proc.stderr
    assert "wandb" in console  # W&B speaks (offline run, sync hint), so its silence below is not WANDB_SILENT's
    # ... and the busy-cores warning is silent when the user has set the threads (whatever the load).
    # nanobind's leak report at shutdown: the objects the entry point froze are never freed (triton, with torch).
    # W&B's "changes to your wandb environment variables will be ignored": a WANDB_* variable changed after the service
    # started early read them (WandbLogger's offline=True rewrote WANDB_MODE to "dryrun").
    for notice in ("anonymous setting has no effect", "litlogger", "litmodels", "LeafSpec", "load average", "leaked",
                   "will be ignored"):
        assert notice not in console, notice
    rows = epoch_metrics(tmp_path)
    assert sorted(rows) == [0, 1, 2]
    # Epoch 0 pre-trains (no Sinkhorn); the OT loss starts at the configured epoch 1.
    assert "train/sinkhorn_iters" not in rows[0]
    assert rows[1]["train/sinkhorn_iters"] >= 1 and rows[2]["train/sinkhorn_converged"] > 0.5
    # The logged accuracy of the last epoch, recomputed from the checkpoint by a second code path:
    # the model's encoder on the fitted images, nearest center, scipy's assignment on the counts.
    model = DeepClustering.load_from_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    dm = MNISTDataModule(data_dir=str(data_dir), download=False, fit_split="train", subset=1000, seed=0)
    dm.setup("fit")
    with torch.no_grad():
        pred = torch.cdist(model.autoencoder.encoder(dm.fit_set.x), model.centers).argmin(1)
    counts = np.zeros((10, 10))
    np.add.at(counts, (pred.numpy(), dm.fit_set.y.numpy()), 1)
    rows_, cols_ = linear_sum_assignment(-counts)
    assert rows[2]["val/acc"] == pytest.approx(counts[rows_, cols_].sum() / 1000, abs=1e-6)
    assert rows[2]["val/acc"] > 0.2  # 30 steps of training: 0.27, above the ~0.13 of a Hungarian match by chance
    # What README says the default keeps: last.ckpt and the latest finished epoch's checkpoint.
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["epoch002.ckpt", "last.ckpt"]
    # last.ckpt holds the state of the last epoch's checkpoint (ModelCheckpoint(save_last=True)).
    last, epoch2 = (torch.load(tmp_path / "checkpoints" / f, weights_only=False) for f in ("last.ckpt", "epoch002.ckpt"))
    assert last["global_step"] == epoch2["global_step"] == 30
    assert all(torch.equal(last["state_dict"][k], v) for k, v in epoch2["state_dict"].items())
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    state = next(v for k, v in ckpt["callbacks"].items() if "PhaseSwitch" in k)
    assert state == {"phase": "joint", "switch_epoch": 1, "initialised": False, "refitted": [], "warmup": None}
    # W&B ran offline, with its run files on disk for a later `wandb sync`.
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


class SignalAt(L.Callback):
    """Sends this process SIGTERM after training batch ``batch`` of epoch ``epoch``: a pre-emption at a known point."""

    def __init__(self, epoch: int, batch: int) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
    """The smoke run (1 pre-training epoch, 2 joint epochs, 10 batches each) without interruption."""
    root = tmp_path_factory.mktemp("full")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        trainer = fit(data_dir, root).trainer
    return root, {k: v.clone() for k, v in trainer.lightning_module.state_dict().items()}


@pytest.mark.parametrize("epoch,batch,stop_step", [(0, 4, 6), (0, 9, 11), (1, 0, 12), (2, 6, 28), (1, 8, 21)],
                         ids=["mid-pretraining", "last-pretraining-batch", "first-joint-batch", "mid-joint-epoch",
                              "agreed-at-an-epochs-last-batch"])
def test_run_stopped_by_sigterm_resumes_to_the_uninterrupted_run(data_dir, tmp_path, uninterrupted, epoch, batch,
                                                                  stop_step):
    """SIGTERM mid-epoch saves last.ckpt at a batch boundary; `--ckpt_path last` ends equal to the run never stopped.

    The signal lands after batch ``batch``'s agreement point (SignalAt runs after SignalCheckpoint), so the stop is
    agreed at the next batch's end; agreed at an epoch's last batch, the epoch's evaluation runs and the stop follows
    the next batch. Cases: inside pre-training, at its last batch (the resumed run makes the phase switch), at the
    first joint batch (just after the switch), inside a joint epoch, agreed at a joint epoch's last batch.
    """
    full_root, full_state = uninterrupted
    cut = tmp_path / "cut"
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=["--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(cut)])
    cli.trainer.callbacks.append(SignalAt(epoch, batch))
    with pytest.raises(SystemExit):  # Lightning's SIGTERMException
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    wandb.finish()
    saved = torch.load(cut / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == stop_step, "last.ckpt is not the state at the agreed stop"
    resumed = fit(data_dir, cut, "--ckpt_path", "last").trainer
    assert resumed.current_epoch == 3
    state = resumed.lightning_module.state_dict()
    for name, p in full_state.items():
        torch.testing.assert_close(state[name], p, rtol=0, atol=0, msg=name)
    a, b = epoch_metrics(full_root)[2], epoch_metrics(cut)[2]
    for key in ("val/acc", "val/nmi", "heldout/acc"):
        assert a[key] == b[key], key


def test_evaluating_less_often_leaves_the_training_unchanged(data_dir, tmp_path, uninterrupted, monkeypatch):
    """`--trainer.check_val_every_n_epoch 2` (a long pre-training evaluates every 10 epochs to take ~40% off its
    epoch): evaluation, the k-means refit before it while pre-training included, draws from no generator training
    uses and writes no parameter, so the run ends weight for weight where the run evaluated every epoch ends, and
    scores the same."""
    full_root, full_state = uninterrupted
    monkeypatch.setenv("WANDB_MODE", "offline")
    sparse = fit(data_dir, tmp_path, "--trainer.check_val_every_n_epoch", "2").trainer
    state = sparse.lightning_module.state_dict()
    assert state.keys() == full_state.keys()
    for name, p in full_state.items():
        torch.testing.assert_close(state[name], p, rtol=0, atol=0, msg=name)
    every, sparse_epochs = epoch_metrics(full_root), epoch_metrics(tmp_path)
    assert sorted(k for k in sparse_epochs if "val/acc" in sparse_epochs[k]) == [1]  # epoch 1 only: (1 + 1) % 2 == 0
    assert sparse_epochs[1]["val/acc"] == every[1]["val/acc"]


def test_a_run_clusters_a_pretraining_made_elsewhere_from_its_checkpoint(data_dir, uninterrupted):
    """`--model.autoencoder.init_args.weights CKPT --phases.pretrain_epochs 0`: the autoencoder another run trained
    (here the smoke run's, from its last.ckpt) is the model's, weight for weight, before the first step."""
    full_root, full_state = uninterrupted
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=["--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.logger", "false",
                             "--model.autoencoder.init_args.weights", str(full_root / "checkpoints" / "last.ckpt"),
                             "--phases.pretrain_epochs", "0"])
    loaded = cli.model.autoencoder.state_dict()
    assert loaded.keys() == {k.removeprefix("autoencoder.") for k in full_state if k.startswith("autoencoder.")}
    for name, p in loaded.items():
        torch.testing.assert_close(p, full_state[f"autoencoder.{name}"], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("fit_split", ["test", "all"])
def test_heldout_scored_on_the_fitted_pass_equals_the_test_loop(data_dir, tmp_path, fit_split):
    """Where the held-out split is the fitted set's tail (fit_split "all" or "test", whole), validation embeds
    each image once and scores heldout/* on that pass's tail; the test loop embeds the split on its own."""
    common = ["--data.init_args.fit_split", fit_split, "--data.init_args.subset", "null", "--trainer.logger", "false"]
    cli = fit(data_dir, tmp_path, *common, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3")
    module, data = cli.trainer.lightning_module, cli.datamodule
    assert len(data.val_dataloader()) == 1 and data.heldout_offset == len(data.fit_set) - len(data.heldout_set)
    val = cli.trainer.callback_metrics
    # The figures' copy of the held-out embeddings: the fitted pass's tail, re-indexed from 0.
    _, index, z = module.eval_embeddings["heldout"]
    _, val_index, val_z = module.eval_embeddings["val"]
    assert torch.equal(index, torch.arange(len(data.heldout_set)))
    torch.testing.assert_close(z, val_z[val_index >= data.heldout_offset], rtol=0, atol=0)
    test = main(["test", "--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir",
                 str(tmp_path), *common, "--ckpt_path", str(tmp_path / "checkpoints" / "last.ckpt")]).trainer.callback_metrics
    for key in ("acc", "nmi", "ari", "acc_potential"):
        assert float(test[f"heldout/{key}"]) == pytest.approx(float(val[f"heldout/{key}"]), abs=1e-6), key
    if fit_split == "test":  # the held-out split is the fitted set itself
        for key in ("acc", "nmi", "size_min", "size_max"):
            assert float(val[f"heldout/{key}"]) == float(val[f"val/{key}"]), key


def test_a_bf16_mixed_fit_trains_draws_and_evaluates_in_full_precision(data_dir, tmp_path):
    """``--trainer.precision bf16-mixed`` (bfloat16 matrix products, ~1.7x faster MNIST steps on CPUs with AMX):
    the autoencoder runs in bfloat16, the OT loss, the evaluation and the pictures in float32. It crashed in the
    final pictures before (bfloat16 embeddings against float32 centers)."""
    cli = fit(data_dir, tmp_path / "bf16", "--trainer.precision", "bf16-mixed", "--trainer.logger", "false")
    module = cli.trainer.lightning_module
    assert cli.trainer.precision == "bf16-mixed"
    _, _, z = module.eval_embeddings["val"]
    assert z.dtype == torch.float32 and torch.isfinite(module.loss.g_avg).all()
    assert (tmp_path / "bf16" / "figures" / "plan_final.png").exists()
    bf16 = cli.trainer.callback_metrics
    assert float(bf16["train/sinkhorn_unconverged"]) == 0
    # Against the same run in float32 (measured: loss 50.568 against 50.548, val/acc 0.279 against 0.271).
    full = fit(data_dir, tmp_path / "fp32", "--trainer.logger", "false").trainer.callback_metrics
    assert float(bf16["train/loss"]) == pytest.approx(float(full["train/loss"]), rel=0.01)
    assert float(bf16["val/acc"]) == pytest.approx(float(full["val/acc"]), abs=0.05)


def test_validate_test_and_predict_from_a_checkpoint(data_dir, tmp_path):
    fit(data_dir, tmp_path, "--trainer.logger", "false")
    last = str(tmp_path / "checkpoints" / "last.ckpt")
    common = ["--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(tmp_path),
              "--trainer.logger", "false", "--ckpt_path", last]
    # The checkpoint rebuilds the system alone too, autoencoder included (from its saved config).
    reloaded = DeepClustering.load_from_checkpoint(last)
    assert isinstance(reloaded.autoencoder, MLPAutoencoder) and reloaded.joint
    torch.testing.assert_close(reloaded.centers, torch.load(last, weights_only=False)["state_dict"]["centers"])
    val = main(["validate", *common]).trainer.callback_metrics
    test = main(["test", *common]).trainer.callback_metrics
    # Two code paths over the held-out split: the validation loop and the test loop.
    assert float(test["heldout/acc"]) == pytest.approx(float(val["heldout/acc"]), abs=1e-6)
    main(["predict", *common])
    with open(tmp_path / "predictions.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["index"]) for r in rows] == list(range(1000))
    # The written clusters, matched to classes, give the validation accuracy on the same samples.
    hits = sum(r["matched_class"] == r["label"] for r in rows)
    assert hits / len(rows) == pytest.approx(float(val["val/acc"]), abs=1e-6)


def test_resume_after_the_process_was_killed(data_dir, tmp_path):
    """SIGKILL mid-run, then `--ckpt_path last` continues from the last finished epoch."""
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "lit_otclust", "fit", "--config", SMOKE, "--data.data_dir", str(data_dir),
           "--trainer.default_root_dir", str(tmp_path), "--trainer.max_epochs", "1000"]
    err = open(tmp_path / "stderr.txt", "w+")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err)
    last = tmp_path / "checkpoints" / "last.ckpt"
    try:
        # Checkpoints are renamed into place whole, so once last.ckpt exists it is complete: kill at once.
        while not last.exists():
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
        err.close()
    done = torch.load(last, weights_only=False)["epoch"]
    resumed = fit(data_dir, tmp_path, "--trainer.max_epochs", str(done + 2), "--ckpt_path", "last").trainer
    assert resumed.current_epoch == done + 2
    # The resumed run logged only the epochs after the checkpoint's.
    log = sorted((tmp_path / "csv").glob("version_*/metrics.csv"))[-1]
    with open(log) as fh:
        epochs = {int(r["epoch"]) for r in csv.DictReader(fh) if r["epoch"]}
    assert epochs == {done + 1}


@pytest.mark.parametrize("config", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_every_training_config_builds(config, monkeypatch):
    """Each Table 1 config parses and instantiates, with K and the input shape linked from the data."""
    if config in ("mnist_kmeans.yaml", "cifar10_kmeans.yaml"):
        pytest.skip("k-means on raw pixels is the baselines command, not a fit config")
    if config == "folder_example.yaml":
        pytest.skip("needs the user's image folder; tests/test_user_data.py builds it on a folder it writes")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    args = ["--config", str(REPO / "configs" / config), "--trainer.logger", "false"]
    # The second step of a two-step config loads the first step's checkpoint: the run that writes it is another
    # shipped config (its default_root_dir), and the file is not there in a test.
    shipped = {p.name: yaml.safe_load(p.read_text()) for p in (REPO / "configs").glob("*.yaml")}
    weights = shipped[config]["model"]["autoencoder"].get("init_args", {}).get("weights")
    if weights is not None:
        roots = {c.get("trainer", {}).get("default_root_dir") for name, c in shipped.items() if name != config}
        assert Path(weights).parent.parent.as_posix() in roots and Path(weights).name == "last.ckpt", weights
        args += ["--model.autoencoder.init_args.weights", "null"]
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False, args=args)
    dm, model = cli.datamodule, cli.model
    assert model.centers.shape == (dm.num_classes, model.autoencoder.latent_dim)
    assert tuple(model.autoencoder.input_shape) == tuple(dm.input_shape)
    stem = config.removesuffix(".yaml")
    method = stem.split("_", 1)[-1]
    expected = None if method.startswith("ae_kmeans") else SoftKMeans if method.startswith("soft_kmeans") else OTLoss
    assert (model.loss is None) if expected is None else type(model.loss) is expected
    switch = next(cb for cb in cli.trainer.callbacks if isinstance(cb, PhaseSwitch))
    # (p): pre-trained here, or elsewhere (`weights`) and then not again
    assert (switch.pretrain_epochs > 0) == ((stem.endswith("_p") or stem == "smoke") and weights is None)


class _ParseOnly(OTClusterCLI):
    def _run_subcommand(self, subcommand: str) -> None:
        self.ran = subcommand


@pytest.mark.parametrize("subcommand", ["fit", "validate", "predict"])
def test_only_the_named_subcommands_parser_is_built_and_it_parses_as_before(subcommand, monkeypatch):
    """OTClusterCLI builds the parser of the subcommand named first only (0.09 s of every run's start,
    bench_startup --cli); the config it parses is the one the four parsers gave, and `--help` or a typo still sees all
    four (the entry module's test below)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    argv = [subcommand, "--config", SMOKE, "--trainer.logger", "false", "--model.loss.init_args.epsilon", "0.05"]
    cli = _ParseOnly(DeepClustering, L.LightningDataModule, subclass_mode_data=True, args=argv)
    assert list(cli._subcommand_parsers) == [subcommand] and cli.ran == subcommand
    monkeypatch.setattr(OTClusterCLI, "subcommands", staticmethod(LightningCLI.subcommands))  # Lightning's, all four
    every = _ParseOnly(DeepClustering, L.LightningDataModule, subclass_mode_data=True, args=argv)
    assert len(every._subcommand_parsers) == 4
    assert cli.config[subcommand] == every.config[subcommand]
    assert cli.model.loss.epsilon == every.model.loss.epsilon == 0.05


@pytest.mark.slow  # subprocesses
def test_the_entry_module_lists_every_subcommand_in_its_help_and_names_them_on_a_typo():
    def run(*argv: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "lit_otclust", *argv], capture_output=True, text=True, cwd=REPO,
                              timeout=300)
        return proc.stdout + proc.stderr

    assert all(name in run("--help") for name in ("fit", "validate", "test", "predict"))
    assert "invalid choice: 'fti' (choose from 'fit', 'validate', 'test', 'predict')" in run("fti")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("extra, terminal, refresh", [
    ([], True, 10), ([], False, EPOCH_END_ONLY), (["--trainer.enable_progress_bar", "false"], True, None),
    (["--trainer.callbacks+=TQDMProgressBar", "--trainer.callbacks.refresh_rate=1"], False, 1)])
def test_progress_bar_redraws_every_tenth_step_unless_the_user_says_otherwise(extra, terminal, refresh, monkeypatch):
    """The default bar redraws every 10th step on a terminal (Lightning's, every step, cost ~6% of an MNIST step) and
    at each epoch's end when stdout is not one (a job's log file); a bar in trainer.callbacks replaces it, and
    enable_progress_bar false leaves none."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setattr(sys, "stdout", _Terminal() if terminal else io.StringIO())
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=["--config", str(REPO / "configs" / "mnist_ot.yaml"), "--trainer.logger", "false", *extra])
    bars = [cb for cb in cli.trainer.callbacks if isinstance(cb, ProgressBar)]
    assert [bar.refresh_rate for bar in bars] == ([] if refresh is None else [refresh])


def test_a_run_without_checkpoints_pictures_or_loggers_trains_and_writes_none_of_them(data_dir, tmp_path):
    """enable_checkpointing false once stopped the run at its start (the CLI still added its ModelCheckpoint, which
    Lightning refuses then); figures.final false with every_n_epochs 0 draws nothing, at the end of fit or predict."""
    cli = fit(data_dir, tmp_path, "--trainer.enable_checkpointing", "false", "--trainer.logger", "false",
              "--figures.every_n_epochs", "0", "--figures.final", "false")
    assert cli.trainer.global_step > 0 and cli.trainer.checkpoint_callbacks == []
    cli.trainer.predict(cli.model, datamodule=cli.datamodule)
    assert not (tmp_path / "figures").exists() and not (tmp_path / "checkpoints").exists()
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("*.png"))
    # The same run with the defaults writes both (so the assertions above can fail).
    fit(data_dir, tmp_path / "defaults", "--trainer.max_epochs", "2")
    assert list((tmp_path / "defaults" / "checkpoints").glob("*.ckpt"))
    assert list((tmp_path / "defaults" / "figures").glob("*_final.png"))


def test_barebones_is_refused_naming_the_settings_that_do_the_same(data_dir, tmp_path):
    """Lightning's barebones mode refuses self.log and the loggers/checkpoints the command adds: one error naming what
    to pass instead, not Lightning's about a logger list the user never wrote."""
    with pytest.raises(ValueError, match="trainer.barebones=true.*--trainer.enable_checkpointing false"):
        fit(data_dir, tmp_path, "--trainer.barebones", "true")


@pytest.mark.parametrize("pretrain", [1, 0])
def test_fast_dev_run_checks_the_configured_phase_in_one_epoch(data_dir, tmp_path, pretrain):
    """fast_dev_run runs one epoch whatever max_epochs says: with pre-training configured it pre-trains (it stopped
    on "pretrain_epochs must be below max_epochs" before), without it runs the clustering loss's steps."""
    cli = fit(data_dir, tmp_path, "--trainer.fast_dev_run", "2", "--phases.pretrain_epochs", str(pretrain))
    assert cli.trainer.global_step == 2
    assert cli.model.joint == (pretrain == 0)


class AbsurdLearningRate(L.Callback):
    """From epoch ``epoch`` on, a learning rate of 1e8: the weights blow up within a step or two."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            for group in trainer.optimizers[0].param_groups:
                group["lr"] = 1e8


def test_a_non_finite_loss_stops_the_run_naming_epoch_step_and_term_and_keeps_the_last_good_checkpoint(data_dir, tmp_path):
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       args=["--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir",
                             str(tmp_path), "--trainer.max_epochs", "4"])
    cli.trainer.callbacks.append(AbsurdLearningRate(epoch=2))
    with pytest.raises(FloatingPointError, match=r"epoch 2, step 2\d: .*(loss|gradient|cost)") as err:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    wandb.finish()
    assert "not finite" in str(err.value) or "nan" in str(err.value)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["epoch"] == 1 and last["global_step"] == 20  # the end of the last good epoch
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values() if v.is_floating_point())
    # Nothing non-finite reached the logs: the run stopped at the first bad step.
    for epoch, row in epoch_metrics(tmp_path).items():
        assert all(math.isfinite(v) for v in row.values()), (epoch, row)


def test_a_removed_or_renamed_flag_says_where_it_went():
    """Flags of before `model.loss` name their replacement; a retired option its result and the commit that runs it."""
    with pytest.raises(SystemExit, match=r"cost_scale was removed .*RESULTS.md.*093e9ce"):
        main(["fit", "--config", SMOKE, "--model.cost_scale", "batch_mean"])
    with pytest.raises(SystemExit, match=r"--model.epsilon became --model.loss.init_args.epsilon"):
        main(["fit", "--config", SMOKE, "--model.epsilon=0.1"])
    with pytest.raises(SystemExit, match=r"--model.loss.class_path lit_otclust.losses.OTLoss"):
        main(["fit", "--config", SMOKE, "--model.clustering", "soft_kmeans"])
    with pytest.raises(SystemExit, match=r"--model.lr became --model.optimizer.init_args.lr"):
        main(["fit", "--config", SMOKE, "--model.lr", "0.01"])
    with pytest.raises(SystemExit, match=r"--model.optimizer became --model.optimizer torch.optim.SGD"):
        main(["fit", "--config", SMOKE, "--model.optimizer", "sgd"])


def test_the_optimizer_is_any_torch_optimizer_by_class_path():
    """``--model.optimizer CLASS`` with its own arguments and ``--model.lr_scheduler CLASS``: the optimizer and the
    schedule configure_optimizers returns, over the autoencoder's and the centers' parameters."""
    cli = OTClusterCLI(DeepClustering, L.LightningDataModule, subclass_mode_data=True, run=False,
                       auto_configure_optimizers=False,
                       args=["--config", SMOKE, "--model.optimizer", "torch.optim.SGD", "--model.optimizer.lr", "0.5",
                             "--model.optimizer.momentum", "0.8", "--model.lr_scheduler",
                             "torch.optim.lr_scheduler.ExponentialLR", "--model.lr_scheduler.gamma", "0.9"])
    config = cli.model.configure_optimizers()
    opt, sched = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert type(opt) is torch.optim.SGD and [g["lr"] for g in opt.param_groups] == [0.5, 0.5]
    assert opt.param_groups[0]["momentum"] == 0.8 and opt.param_groups[1]["params"] == [cli.model.centers]
    assert type(sched) is torch.optim.lr_scheduler.ExponentialLR and sched.gamma == 0.9
    default = DeepClustering(MLPAutoencoder()).configure_optimizers()  # the paper's: fused Adam, halved every 50
    assert default["optimizer"].defaults["fused"] and default["optimizer"].defaults["lr"] == 1e-3
    assert (default["lr_scheduler"]["scheduler"].step_size, default["lr_scheduler"]["scheduler"].gamma) == (50, 0.5)


def test_a_checkpoint_of_before_the_loss_module_names_the_commit_that_reads_it():
    module = DeepClustering(MLPAutoencoder(), loss=OTLoss())
    old = {"state_dict": {"centers": module.centers.detach(), "g_avg": torch.zeros(10)},
           "hyper_parameters": {"clustering": "ot", "epsilon": 0.01}}
    with pytest.raises(ValueError, match="before the clustering loss became `model.loss`; commit 093e9ce"):
        module.on_load_checkpoint(old)


def test_without_the_wandb_package_a_fit_logs_to_csv_alone_and_says_so(tmp_path, monkeypatch):
    """A bare GPU image without wandb: the fit must not stop at WandbLogger's ModuleNotFoundError."""
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find_spec(name, *a))
    with pytest.warns(UserWarning, match="wandb package is not installed"):
        loggers = default_loggers(tmp_path, "run")
    assert [type(lg) for lg in loggers] == [CSVLogger]
