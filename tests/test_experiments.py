"""Studies as data: study files, their commands, the local and SLURM launchers, records, and the reports rendered
from records (tables, figures, paired tests), with the results notebook executed on a tiny study."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
import yaml
from nbclient import NotebookClient
from scipy import stats

from lit_otclust import experiments, legacy
from lit_otclust.lab import runner, studies
from lit_otclust.lab.legacy import translate
from lit_otclust.data import geometric_proportions

REPO = Path(__file__).resolve().parents[1]
STUDIES = REPO / "configs" / "studies"
MNIST_OT = str(REPO / "configs" / "mnist_ot.yaml")
# The MNIST configs' lambda and training solve before they shipped lambda = 0.1 and the fixed solve; and no refit of
# the centers, before the refit at the last joint epoch became the default under a non-uniform w; and k-means at the
# switch, before size-constrained k-means became the default start there.
PINNED = {"--model.clustering_weight": "0.003333", "--model.sinkhorn_solver": "solve", "--phases.refit_epochs": "[]",
          "--phases.center_init": "kmeans"}
# The same, as the study builds them today (translate).
PINNED_NOW = {"--model.clustering_weight": "0.003333", "--model.loss.init_args.solver": "solve",
              "--phases.refit_epochs": "[]", "--phases.center_init": "kmeans"}
# The flags every fit command gives, before the study's overrides.
STANDARD = {"--config", "--seed_everything", "--trainer.default_root_dir", "--trainer.enable_progress_bar",
            "--trainer.enable_model_summary", "--ckpt_path"}


def write_runs(folder: Path, accs: dict[str, list[float]]) -> None:
    """Result files in the schema ``runner.execute`` writes, with 3 epochs of curves each."""
    folder.mkdir(parents=True, exist_ok=True)
    for method, values in accs.items():
        for seed, acc in enumerate(values):
            curves = {str(e): {"val/acc": acc * (e + 1) / 3, "train/loss": 10.0 - e} for e in range(3)}
            record = {"name": f"mnist_{method}__seed={seed}", "config": f"mnist_{method}", "dataset": "mnist",
                      "method": method, "seed": seed, "grid": {}, "settings": {}, "seconds": 1.0,
                      "final": curves["2"], "curves": curves, "command": "test"}
            (folder / f"{record['name']}.json").write_text(json.dumps(record))


def commands_of(study: studies.Study) -> dict[str, dict[str, str]]:
    """Each run's fit command as ``{--flag: value}`` (flag order aside), by record path."""
    out = {}
    for run in study.runs:
        tokens = shlex.split(shlex.join(run.command()))
        assert tokens[:4] == ["python", "-m", "lit_otclust", "fit"]
        out[str(run.record)] = dict(zip(tokens[4::2], tokens[5::2]))
    return out


# ---- study files and their commands --------------------------------------------------------------------------


def test_a_study_files_dry_run_lists_the_exact_commands(tmp_path, monkeypatch, capsys):
    """Blocks inherit the study's seeds, epochs and overrides; a grid multiplies runs; a block's folder holds its
    records; a finished run is marked done and an interrupted one resumes from its last checkpoint."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "a_ot.yaml").write_text("seed_everything: 0\n")
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "b_skm.yaml").write_text("seed_everything: 0\n")  # found from the study file's folder
    (tmp_path / "studies" / "s.yaml").write_text(yaml.safe_dump({
        "out": "res", "seeds": "0-1", "epochs": 40, "set": {"data.data_dir": "../data", "model.flag": True},
        "runs": [{"configs": ["configs/a_ot.yaml", "b_skm.yaml"], "seeds": [3]},
                 {"configs": ["configs/a_ot.yaml"], "grid": {"model.loss.init_args.epsilon": [0.1, 1],
                                                              "model.w": [[0.2, 0.8]]},
                  "set": {"model.clustering_weight": 0.5}, "folder": "sub"}]}))
    study = experiments.load_study("studies/s.yaml")
    fixed = "--trainer.max_epochs 40 --data.data_dir ../data --model.flag true"

    def fit(config: str, root: str, seed: int, extra: str) -> str:
        return (f"python -m lit_otclust fit --config {config} --seed_everything {seed} --trainer.default_root_dir "
                f"{root} --trainer.enable_progress_bar false --trainer.enable_model_summary false {extra}")

    expected = [fit("configs/a_ot.yaml", "res/runs/a_ot__seed=3", 3, fixed),
                fit("studies/b_skm.yaml", "res/runs/b_skm__seed=3", 3, fixed)]
    for seed in (0, 1):
        for eps in ("0.1", "1"):
            name = f"a_ot__epsilon={eps}__w=[0.2,0.8]__seed={seed}"
            expected.append(fit("configs/a_ot.yaml", f"'res/sub/runs/{name}'", seed,  # quoted: [ is the shell's
                                f"--model.clustering_weight 0.5 {fixed} --model.loss.init_args.epsilon {eps} "
                                "--model.w '[0.2,0.8]'"))
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "b_skm__seed=3.json").write_text("{}")
    (tmp_path / "res" / "sub" / "runs" / "a_ot__epsilon=1__w=[0.2,0.8]__seed=1" / "checkpoints").mkdir(parents=True)
    (tmp_path / "res" / "sub" / "runs" / "a_ot__epsilon=1__w=[0.2,0.8]__seed=1" / "checkpoints" / "last.ckpt").touch()
    expected[1] = "# done: " + expected[1]
    expected[-1] += " --ckpt_path last"
    assert experiments.main(["run", "studies/s.yaml", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == expected
    assert "6 runs in res: 1 done, 5 to run" in captured.err
    assert study.label(study.runs[-1]) == "sub/a_ot__epsilon=1__w=[0.2,0.8]__seed=1"
    assert not list(tmp_path.glob("res/**/*.log"))  # nothing started


def test_a_set_values_seed_placeholder_is_each_runs_seed(tmp_path):
    """``{seed}`` in a block's ``set`` names each seed's own file (its pre-training's checkpoint); the record's settings
    state the path that ran, and the grid and the names are untouched."""
    study = studies.parse_study({
        "out": "res", "seeds": "0-2",
        "runs": [{"configs": ["configs/mnist_ot_p.yaml"], "grid": {"model.clustering_weight": [0.3]},
                  "set": {"model.autoencoder.init_args.weights": "pre/ae__seed={seed}/last.ckpt",
                          "phases.pretrain_epochs": 0}}]}, REPO / "configs" / "studies" / "x.yaml")
    for seed, run in zip((0, 1, 2), study.runs):
        assert run.settings["model.autoencoder.init_args.weights"] == f"pre/ae__seed={seed}/last.ckpt"
        tokens = run.command()
        assert tokens[tokens.index("--model.autoencoder.init_args.weights") + 1] == f"pre/ae__seed={seed}/last.ckpt"
        assert run.name == f"mnist_ot_p__clustering_weight=0.3__seed={seed}"


def test_only_runs_the_matching_runs_the_first_patterns_first(tmp_path, monkeypatch, capsys):
    """``--only`` picks runs by name, in the order of its patterns, each run once; a pattern matching none is an
    error that names it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_ot.yaml").write_text("seed_everything: 0\n")
    (tmp_path / "b_skm.yaml").write_text("seed_everything: 0\n")
    study = {"out": "res", "seeds": "0-2", "configs": ["a_ot.yaml", "b_skm.yaml"]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    assert experiments.main(["run", "s.yaml", "--dry-run", "--only", "b_skm__*", "--only", "a_ot__seed=[02]",
                             "--only", "b_skm__seed=1"]) == 0
    roots = [line.split("--trainer.default_root_dir ")[1].split()[0] for line in capsys.readouterr().out.splitlines()]
    assert roots == ["res/runs/b_skm__seed=0", "res/runs/b_skm__seed=1", "res/runs/b_skm__seed=2",
                     "res/runs/a_ot__seed=0", "res/runs/a_ot__seed=2"]
    with pytest.raises(SystemExit):
        experiments.main(["run", "s.yaml", "--dry-run", "--only", "a_ot__seed=1", "--only", "a_ot_seed=1"])
    assert "--only 'a_ot_seed=1' matches no run of s.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["run"], ["report"], ["compare"], ["claims"]])
def test_every_commands_help_prints(command, capsys):
    """`--help` exits 0 and names the command's options (argparse formats help text with %, so a stray % in a
    docstring would crash it)."""
    with pytest.raises(SystemExit) as exit_:
        experiments.main([*command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:")
    if command == ["run"]:
        assert "--only" in out


def test_a_study_file_names_its_mistakes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="'sed'"):
        studies.parse_study({"out": "r", "configs": [MNIST_OT], "sed": [0]})
    with pytest.raises(ValueError, match="'grids'"):
        studies.parse_study({"out": "r", "runs": [{"configs": [MNIST_OT], "grids": {}}]})
    with pytest.raises(FileNotFoundError, match="config 'configs/mnist_nope.yaml' not found"):
        studies.parse_study({"out": "r", "configs": ["configs/mnist_nope.yaml"]})
    with pytest.raises(ValueError, match="range like '0-49'"):
        studies.parse_study({"out": "r", "configs": [MNIST_OT], "seeds": "0..49"})
    with pytest.raises(ValueError, match="named twice with different overrides"):
        studies.parse_study({"out": "r", "runs": [{"configs": [MNIST_OT]},
                                                  {"configs": [MNIST_OT], "set": {"trainer.max_epochs": 3}}]})


def test_the_paper_protocol_is_250_trained_mnist_runs(monkeypatch, capsys):
    """Table 1's five trained columns at the paper's 50 seeds, in a folder of their own, the configs as they are."""
    monkeypatch.chdir(REPO)
    study = experiments.load_study("configs/studies/paper_protocol.yaml")
    assert experiments.main(["run", "configs/studies/paper_protocol.yaml", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len({line for line in lines}) == 250
    configs = {Path(c["--config"]).stem for c in commands_of(study).values()}
    assert configs == {"mnist_ae_kmeans", "mnist_soft_kmeans", "mnist_soft_kmeans_p", "mnist_ot", "mnist_ot_p"}
    assert sorted({run.seed for run in study.runs}) == list(range(50))
    assert all(not run.grid and set(run.fixed) == {"data.data_dir"} for run in study.runs)
    assert study.folders == [Path("results/paper")]


@pytest.mark.parametrize("name", sorted(p.stem for p in STUDIES.glob("*.yaml")))
def test_a_committed_study_finds_its_records_and_their_commands(name, monkeypatch):
    """A study re-run skips its committed records: every record in its folders is one of its runs, made by the
    command the study builds for it (flag order aside; an interrupted run's record adds ``--ckpt_path last``)."""
    monkeypatch.chdir(REPO)
    study = experiments.load_study(f"configs/studies/{name}.yaml")
    try:
        built = commands_of(study)
    except ValueError as error:  # a retired option: the study runs at the commit the message names
        assert "was removed" in str(error) and legacy.LAST_FLAT_COMMIT[:7] in str(error)
        return
    for folder in study.folders:
        for path in folder.glob("*.json"):
            record = json.loads(path.read_text())
            assert str(path) in built, f"{path} is no run of {name}.yaml"
            tokens = shlex.split(record["command"])
            done = dict(zip(tokens[4::2], tokens[5::2]))
            done.pop("--ckpt_path", None)
            # A fit logged to W&B names its group, job type, tags and study: where it shows, not what it computes.
            done = {flag: value for flag, value in done.items() if not flag.startswith(("--wandb.", "--pretrain_cache"))}
            config = done["--config"]  # the first records named it absolutely, in the checkout that ran them
            done["--config"] = config[config.rindex("configs/"):] if os.path.isabs(config) else config
            # Its flags of before `model.loss`, as the study builds them today.
            overrides = {flag[2:]: value for flag, value in done.items() if flag not in STANDARD}
            done = {**{flag: value for flag, value in done.items() if flag in STANDARD},
                    **{f"--{key}": value for key, value in translate(done["--config"], overrides).items()}}
            # The study files now pin the MNIST recipe of their records, which the configs then held (PINNED): a
            # record made before the pin names it nowhere.
            pinned = {key: value for key, value in built[str(path)].items() if key not in done}
            assert pinned.items() <= PINNED_NOW.items(), path
            assert done == {k: v for k, v in built[str(path)].items() if k not in pinned}, path
            # A committed record states the flags of its commit: the study's own, before translate where its commit
            # had none, or as they took effect (translated) where it had.
            run = next(r for r in study.runs if str(r.record) == str(path))
            stated = [{k: v for k, v in settings.items() if k in record["settings"] or PINNED.get(f"--{k}") != v}
                      for settings in ({**{k: v.replace("{seed}", str(run.seed)) for k, v in run.fixed.items()},
                                        **run.grid}, run.settings)]
            assert record["settings"] in stated, path


def test_every_committed_record_states_the_settings_its_command_gave():
    """A record's ``settings`` are the overrides its fit command passed, grid included: none shows a study `set`
    value that the grid replaced (a record once said lambda = 1/300 for a run at 0.1)."""
    standard = {"--config", "--seed_everything", "--trainer.default_root_dir", "--trainer.enable_progress_bar",
                "--trainer.enable_model_summary", "--ckpt_path"}
    records = [json.loads(p.read_text()) for p in (REPO / "results").rglob("*.json")]
    records = [r for r in records if isinstance(r, dict) and "command" in r and "grid" in r]
    assert len(records) > 500
    for record in records:
        assert "fixed" not in record, record["name"]
        tokens = shlex.split(record["command"])
        flags = tokens[tokens.index("fit") + 1:]
        given = {flag[2:]: value for flag, value in zip(flags[::2], flags[1::2])
                 if flag not in standard and not flag.startswith(("--wandb.", "--pretrain_cache"))}
        assert record["settings"] == given, record["name"]
        assert record["grid"].items() <= given.items(), record["name"]


def test_the_imbalanced_study_states_the_proportions_it_describes():
    """Its vectors are geometric_proportions(10, r) and the misspecified twins (class k scaled by 1.3 for even k,
    0.7 for odd k, renormalised), each rounded to 4 decimals with the largest entry 1 minus the others."""
    def rounded(w: list[float]) -> list[float]:
        out = [round(p, 4) for p in w]
        top = max(range(len(w)), key=lambda k: w[k])
        out[top] = round(1 - math.fsum(p for k, p in enumerate(out) if k != top), 4)
        return out

    def misspecified(w: list[float]) -> list[float]:
        off = [p * (1.3 if k % 2 == 0 else 0.7) for k, p in enumerate(w)]
        return [p / math.fsum(off) for p in off]

    study = studies.load_study(STUDIES / "imbalanced.yaml")
    stated = {}
    for run in study.runs:
        data = json.loads(run.fixed.get("data.init_args.class_proportions", "[0.1]"))
        stated[run.out.parent.name, run.out.name] = (data, json.loads(run.fixed.get("model.proportions", "null")))
    for name, true in {"two_digits": [0.2, 0.8], "geometric10": geometric_proportions(10, 10.0),
                       "geometric3": geometric_proportions(10, 3.0)}.items():
        assert stated[name, "uniform_w"] == (rounded(true), None)
        assert stated[name, "true_w"] == (rounded(true), rounded(true))
        assert stated[name, "misspecified_w"] == (rounded(true), rounded(misspecified(true)))
    assert stated["balanced", "misspecified_w"][1] == [0.13, 0.07] * 5
    assert stated["two_digits", "misspecified_w"][1] == [0.3171, 0.6829]  # (0.2 * 1.3, 0.8 * 0.7) / 0.82


# ---- running ---------------------------------------------------------------------------------------------------


def test_runs_spread_over_the_gpus_jobs_a_gpu(tmp_path, monkeypatch):
    """4 runs, 2 GPUs, 2 jobs: each run sees one GPU through CUDA_VISIBLE_DEVICES, never more than 2 at once on it."""
    study = studies.parse_study({"out": str(tmp_path), "configs": [MNIST_OT], "seeds": "0-3"})
    lock, live, most, seen = threading.Lock(), {"3": 0, "5": 0}, {"3": 0, "5": 0}, []

    class Fit:
        def __init__(self, cmd, env, **kwargs):
            self.gpu = env["CUDA_VISIBLE_DEVICES"]
            assert env["OMP_NUM_THREADS"] == "2"
            with lock:
                seen.append(self.gpu)
                live[self.gpu] += 1
                most[self.gpu] = max(most[self.gpu], live[self.gpu])

        def wait(self) -> int:
            time.sleep(0.2)
            with lock:
                live[self.gpu] -= 1
            return 1  # failed: no record to read

    monkeypatch.setattr(runner.subprocess, "Popen", Fit)
    assert runner.run_local(study, jobs=2, threads=2, gpus=["3", "5"]) == 1
    assert sorted(seen) == ["3", "3", "5", "5"] and max(most.values()) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,7")  # a child's ids are this process's own
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    assert runner.visible_gpus() == ["6", "7"]


def test_sigterm_to_the_runner_reaches_the_fit_and_starts_no_other(tmp_path, monkeypatch):
    """A stand-in fit exits 143 on SIGTERM, as lit_otclust's does after saving last.ckpt; the runner, signalled while
    the first of two runs is in flight, passes it on, starts nothing more and exits 143."""
    study = studies.parse_study({"out": str(tmp_path), "configs": [MNIST_OT], "seeds": [0, 1]})
    fit = ("import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); "
           "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)")
    monkeypatch.setattr(studies.Run, "command", lambda run: ["python", "-c", fit, str(run.root / "started")])

    def signal_once_started() -> None:
        while not (study.runs[0].root / "started").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_once_started, daemon=True).start()
    start = time.time()
    assert runner.run_local(study, jobs=1, gpus=[]) == runner.SIGTERM_EXIT
    assert time.time() - start < 30
    assert not (study.runs[1].root / "started").exists() and not list(tmp_path.glob("*.json"))


def test_committed_studies_build_todays_flags_or_name_the_commit_of_a_retired_option():
    """The flags of before ``model.loss`` in the committed study files become today's when a study builds its
    commands (``translate``); an option since retired stops the command naming the commit that runs it."""
    old = {"--model.clustering", *(f"--{key}" for key in legacy.MOVED | legacy.MOVED_OT | legacy.OPTIMIZATION)}
    built = retired = 0
    for path in sorted(STUDIES.glob("*.yaml")):
        for run in studies.load_study(path).runs:
            try:
                flags = set(run.command()[4::2])
            except ValueError as error:
                assert "was removed" in str(error) and legacy.LAST_FLAT_COMMIT[:7] in str(error)
                retired += 1
                continue
            assert not flags & old, (path.name, flags & old)
            built += 1
    assert built > 500 and retired > 0
    skm = translate(str(REPO / "configs" / "mnist_soft_kmeans_dkm.yaml"),
                           {"model.sinkhorn_solver": "solve", "model.epsilon": "0.1"})
    assert skm == {"model.loss.init_args.epsilon": "0.1"}  # soft k-means ignored the OT solve's flags, and still does
    assert translate(MNIST_OT, {"model.clustering": "soft_kmeans", "model.soft_kmeans_form": "expected"}) == {
        "model.loss.class_path": "lit_otclust.losses.SoftKMeans", "model.loss.init_args.form": "expected"}
    assert translate(MNIST_OT, {"model.clustering": "none", "model.epsilon": "1"}) == {"model.loss": "null"}


def test_the_optimizer_flags_of_before_become_the_classes_they_built():
    """``--model.optimizer sgd --model.lr ... --model.lr_decay_gamma ...`` (a string switch and its numbers) become
    today's optimizer and schedule classes, with the values the flags left out from the config or the old defaults;
    on the command line each names its replacement."""
    dec = {"model.optimizer": "sgd", "model.lr": "0.0012755", "model.momentum": "0.9", "model.lr_decay_gamma": "1.0"}
    assert translate(MNIST_OT, dec) == {
        "model.optimizer.class_path": "torch.optim.SGD", "model.optimizer.init_args.lr": "0.0012755",
        "model.optimizer.init_args.momentum": "0.9", "model.lr_scheduler.class_path": "torch.optim.lr_scheduler.StepLR",
        "model.lr_scheduler.init_args.step_size": "50", "model.lr_scheduler.init_args.gamma": "1.0"}
    # Adam at another lr: the default's fused Adam; SGD's old default momentum; a config that names its optimizer.
    assert translate(MNIST_OT, {"model.lr": "0.0001", "model.clustering_weight": "0.1"}) == {
        "model.optimizer.class_path": "torch.optim.Adam", "model.optimizer.init_args.lr": "0.0001",
        "model.optimizer.init_args.fused": "true", "model.clustering_weight": "0.1"}
    assert translate(MNIST_OT, {"model.optimizer": "sgd"})["model.optimizer.init_args.momentum"] == "0.9"
    dec_config = str(REPO / "configs" / "mnist_ae_kmeans_dec.yaml")
    assert translate(dec_config, {"model.lr": "0.1", "model.lr_decay_epochs": "10"}) == {
        "model.optimizer.init_args.lr": "0.1", "model.lr_scheduler.class_path": "torch.optim.lr_scheduler.StepLR",
        "model.lr_scheduler.init_args.step_size": "10", "model.lr_scheduler.init_args.gamma": "1.0"}
    for argv in (["--model.lr", "0.1"], ["--model.optimizer", "sgd"], ["--model.lr_decay_gamma=1.0"]):
        with pytest.raises(ValueError, match="became --model.(optimizer|lr_scheduler)"):
            legacy.check_argv(argv)
    legacy.check_argv(["--model.optimizer", "torch.optim.SGD", "--model.optimizer.init_args.lr", "0.1"])


def test_the_slurm_array_runs_what_is_left_and_requeues_a_stopped_task(tmp_path, monkeypatch):
    """The array script, run by bash with stand-ins for srun and scontrol: task i runs the i-th run without a record
    (``run STUDY --run NAME``), and a task whose run exits 143 requeues itself. A second submission with every
    record written submits nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"out": "res", "configs": [MNIST_OT], "seeds": "0-2",
                                                     "grid": {"model.epsilon": [0.1]}}))
    study = studies.load_study("s.yaml")
    (tmp_path / "res").mkdir()
    study.runs[0].record.write_text("{}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in {"sbatch": 'echo "$@" >> sbatch.args; echo "Submitted batch job 7"',
                       "srun": 'echo "$@" > srun.args; exit ${SRUN_EXIT}',
                       "scontrol": 'echo "$@" > scontrol.args'}.items():
        (bin_dir / tool).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / tool).chmod(stat.S_IRWXU)
    script = runner.submit_slurm(study, threads=2, jobs=4, options=["--gpus-per-task=1"],
                                  sbatch=str(bin_dir / "sbatch"))
    text = script.read_text()
    assert script == Path("res/runs/slurm/s.sbatch") and (tmp_path / "sbatch.args").read_text().split() == [str(script)]
    for line in ("#SBATCH --array=0-1%4", "#SBATCH --cpus-per-task=2", "#SBATCH --signal=TERM@120", "#SBATCH --requeue",
                 "#SBATCH --gpus-per-task=1", f"#SBATCH --chdir={tmp_path}", "#SBATCH --open-mode=append"):
        assert line in text.splitlines()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "12", "SLURM_ARRAY_TASK_ID": "1"}
    for status in (143, 0, 1):
        (tmp_path / "scontrol.args").unlink(missing_ok=True)
        done = subprocess.run(["bash", str(script)], env={**env, "SRUN_EXIT": str(status)}, capture_output=True)
        assert done.returncode == status
        requeue = (tmp_path / "scontrol.args").read_text().split() if (tmp_path / "scontrol.args").exists() else None
        assert requeue == (["requeue", "12"] if status == 143 else None)
    srun = shlex.split((tmp_path / "srun.args").read_text())
    assert srun[1:] == ["-m", "lit_otclust.experiments", "run", "s.yaml", "--threads", "2", "--run",
                        "mnist_ot__epsilon=0.1__seed=2"]
    assert study.find(srun[-1]) is study.runs[2]
    for run in study.runs:
        run.record.write_text("{}")
    assert runner.submit_slurm(study, sbatch=str(bin_dir / "sbatch")) is None
    assert len((tmp_path / "sbatch.args").read_text().splitlines()) == 1


@pytest.mark.slow
def test_the_smoke_study_writes_its_two_records_and_skips_them_the_second_time(data_dir, tmp_path, monkeypatch, capsys):
    """``run`` on configs/studies/smoke.yaml (out and data moved here, 2 epochs): each record holds what the fit's
    CSV log holds, the confusion counts and what reproduces it; a second call starts nothing."""
    monkeypatch.chdir(REPO)
    spec = yaml.safe_load((STUDIES / "smoke.yaml").read_text())
    spec.update(out=str(tmp_path), epochs=2, set={"data.data_dir": str(data_dir), "figures.every_n_epochs": 1})
    study = studies.parse_study(spec, STUDIES / "smoke.yaml")
    assert runner.run_local(study, jobs=1, gpus=[]) == 0
    records = experiments.load(tmp_path)
    assert [r["seed"] for r in records] == [0, 1]
    for record, run in zip(records, study.runs):
        assert sorted(record["curves"], key=int) == ["0", "1"]
        csv_rows = experiments.read_curves(run.root / "csv" / "version_0" / "metrics.csv")
        assert record["final"]["val/acc"] == csv_rows[1]["val/acc"] > 0.2
        cache = ["--pretrain_cache", str(tmp_path / "runs" / "pretrained")]
        assert record["command"] == shlex.join(run.command() + cache) and record["command"].startswith(
            f"python -m lit_otclust fit --config configs/smoke.yaml --seed_everything {run.seed}")
        assert record["study"] == str(STUDIES / "smoke.yaml") and record["omp_num_threads"] == 1 and record["torch"]
        # The confusion counts of each epoch: all 1000 images, their matched counts the epoch's logged accuracy.
        for epoch, counts in record["confusion"].items():
            counts = np.array(counts["counts"])
            assert counts.shape == (10, 10) and counts.sum() == 1000
            assert np.trace(counts) / 1000 == pytest.approx(record["curves"][epoch]["val/acc"], abs=1e-6)
    written = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.json")}
    capsys.readouterr()
    assert runner.run_local(study, jobs=1, gpus=[]) == 0
    assert f"2 runs in {tmp_path}: 2 done, 0 to run" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.json")} == written


def test_a_studys_runs_share_a_pretraining_and_the_record_says_whose(data_dir, tmp_path, monkeypatch):
    """Of two runs that differ after the switch only, the second starts from the first's pre-training (the runner's
    default); its record names it and holds the pre-training epoch's row, equal to the first's."""
    monkeypatch.chdir(REPO)
    spec = {"out": str(tmp_path), "epochs": 2, "configs": ["configs/smoke.yaml"],
            "grid": {"model.clustering_weight": [0.1, 0.2]},
            "set": {"data.data_dir": str(data_dir)}}
    study = studies.parse_study(spec, STUDIES / "smoke.yaml")
    assert runner.run_local(study, jobs=1, gpus=[]) == 0
    first, second = (json.loads(run.record.read_text()) for run in study.runs)
    assert "pretrained" not in first and second["pretrained"]["source"] == str(study.runs[0].root)
    assert sorted(second["curves"], key=int) == ["0", "1"]
    assert second["curves"]["0"] == first["curves"]["0"]
    assert second["curves"]["1"]["val/acc"] != first["curves"]["1"]["val/acc"]  # the joint epoch is its own


def test_a_resumed_runs_seconds_count_every_attempt_up_to_its_last_checkpoint(tmp_path):
    """Attempt 1 runs from t=100 and is killed after its last checkpoint at t=400; attempt 2 resumes at
    t=1000 and ends at t=1500: 300 + 500 seconds, not the last attempt's 500."""
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    assert runner._attempts_seconds(tmp_path, 100.0, done=False) == 0
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"")
    os.utime(ckpt, (400.0, 400.0))
    assert runner._attempts_seconds(tmp_path, 1000.0, done=False) == 300
    assert runner._attempts_seconds(tmp_path, 1500.0, done=True) == 800
    # A run done in one attempt counts that attempt alone.
    other = tmp_path / "other"
    other.mkdir()
    runner._attempts_seconds(other, 10.0, done=False)
    assert runner._attempts_seconds(other, 60.0, done=True) == 50


def test_a_records_commit_is_dirty_for_code_changes_not_for_results(tmp_path, monkeypatch):
    """A study rewrites its results tables as runs land; only a change to the code or the configs is '+dirty'."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    for path in ("lit_otclust/ot.py", "configs/a.yaml", "results/table.md"):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text("v1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "HEAD").strip()
    monkeypatch.setattr(runner, "REPO", tmp_path)
    (tmp_path / "results/table.md").write_text("v2\n")
    assert runner._commit() == head
    (tmp_path / "configs/a.yaml").write_text("v2\n")
    assert runner._commit() == head + "+dirty"


# ---- reports ---------------------------------------------------------------------------------------------------


def test_table_reports_mean_std_range_and_welch_test(tmp_path):
    ot, skm = [0.80, 0.85, 0.90], [0.70, 0.72, 0.80]
    write_runs(tmp_path, {"ot": ot, "soft_kmeans": skm})
    text = experiments.table(str(tmp_path), baselines=None)
    assert f"{np.mean(ot):.3f} (± {np.std(ot, ddof=1):.3f}) | [0.800, 0.900] | 0.851 (± 0.032)" in text
    p = stats.ttest_ind(ot, skm, equal_var=False).pvalue
    assert f"| ot | soft_kmeans | {np.mean(ot) - np.mean(skm):+.3f} | {p:.3g} |" in text
    # The per-method means of the other metrics: acc logged, the rest absent in these records.
    assert f"| mnist | ot |  | {np.mean(ot):.3f} | — | — |" in text


def test_table_states_a_per_seed_override_once_as_the_study_files_template(tmp_path):
    """Each seed's run loads its own seed's checkpoint (``{seed}`` in a study's ``set``): the table names the
    template once, as every run's, not one path per seed marked '(some runs)'."""
    template = "results/x/runs/mnist_ae_kmeans__seed={seed}/checkpoints/last.ckpt"
    write_runs(tmp_path, {"ot_p": [0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995, 0.996]})
    for path in tmp_path.glob("*.json"):  # settings as the runner records them: the template filled in
        record = json.loads(path.read_text())
        record["settings"] = {"weights": template.replace("{seed}", str(record["seed"])), "trainer.max_epochs": "200"}
        path.write_text(json.dumps(record))
    first_line = experiments.table(str(tmp_path), baselines=None).splitlines()[0]
    assert first_line == f"Overrides given to the runs: trainer.max_epochs=200, weights={template}."
    # A value that only shares the seed's digits (seed 1 against seed=11) stays as it is.
    record = json.loads((tmp_path / "mnist_ot_p__seed=1.json").read_text())
    record["settings"]["weights"] = template.replace("{seed}", "11")
    (tmp_path / "mnist_ot_p__seed=1.json").write_text(json.dumps(record))
    assert "mnist_ae_kmeans__seed=11/checkpoints/last.ckpt (some runs)" in experiments.table(str(tmp_path),
                                                                                            baselines=None)


def test_report_writes_a_studys_table_figures_and_paired_tests(tmp_path, monkeypatch):
    """``report`` on a synthetic study: its table.md is :func:`table`'s, with scipy's numbers; a second report leaves
    the files as they were; the paired tests are scipy's ttest_rel, and a run not landed yet is a row saying so."""
    monkeypatch.chdir(tmp_path)
    ot, skm = [0.80, 0.85, 0.90], [0.70, 0.72, 0.95]
    write_runs(tmp_path / "res", {"ot": ot, "soft_kmeans": skm})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "out": "res", "configs": [MNIST_OT, MNIST_OT.replace("mnist_ot", "mnist_soft_kmeans")], "seeds": "0-2",
        "report": {"baselines": None, "compare": [{"a": "res:mnist_ot", "b": "res:mnist_soft_kmeans"},
                                                  {"a": "res:mnist_ot:epsilon=1", "b": "res:mnist_ot"}]}}))
    written = experiments.report(experiments.load_study("s.yaml"))
    assert [p.name for p in written] == ["table.md", "figure1_mnist.png", "compare.md"]
    table = (tmp_path / "res" / "table.md").read_text()
    assert table == experiments.table("res", baselines=None)
    assert f"| mnist | ot |  | 3 | {np.mean(ot):.3f} (± {np.std(ot, ddof=1):.3f}) | [0.800, 0.900] |" in table
    p = stats.ttest_ind(ot, skm, equal_var=False).pvalue
    assert f"| mnist |  | ot | soft_kmeans | {np.mean(ot) - np.mean(skm):+.3f} | {p:.3g} |" in table
    before = {p: p.read_bytes() for p in written}
    experiments.main(["report", "s.yaml"])
    assert {p: p.read_bytes() for p in written} == before
    compare = (tmp_path / "res" / "compare.md").read_text()
    assert f"| {stats.ttest_rel(ot, skm).pvalue:.3g} |" in compare
    assert "no runs of mnist_ot with settings ['epsilon=1'] in res" in compare


def test_report_of_a_study_without_records_says_to_run_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"out": "res", "configs": [MNIST_OT], "seeds": "0-2",
                                                     "report": {"compare": [{"a": "res:mnist_ot", "b": "res:mnist_ot"}]}}))
    with pytest.raises(SystemExit) as exit_:
        experiments.main(["report", "s.yaml"])
    assert exit_.value.code == 2 and not (tmp_path / "res").exists()
    assert "no records in res to report yet; train them first: python -m lit_otclust.experiments run s.yaml" \
        in capsys.readouterr().err


def test_compare_of_runs_on_disjoint_seeds_names_each_sides_seeds(tmp_path, capsys):
    write_runs(tmp_path, {"ot": [0.80, 0.85, 0.90], "soft_kmeans": [0.70, 0.72, 0.95]})
    for name in ["mnist_ot__seed=2", "mnist_soft_kmeans__seed=0", "mnist_soft_kmeans__seed=1"]:
        (tmp_path / f"{name}.json").unlink()
    with pytest.raises(ValueError, match=r"mnist_ot \(seeds 0-1\) and .*mnist_soft_kmeans \(seeds 2\) share no seed"):
        experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans")
    table = experiments.compare_table([{"a": f"{tmp_path}:mnist_ot", "b": f"{tmp_path}:mnist_soft_kmeans"}])
    assert "share no seed" in table and "nan" not in table
    with pytest.raises(SystemExit) as exit_:  # the command line: the message and status 2, not a traceback
        experiments.main(["compare", "--a", f"{tmp_path}:mnist_ot", "--b", f"{tmp_path}:mnist_soft_kmeans"])
    assert exit_.value.code == 2 and "share no seed" in capsys.readouterr().err


def test_compare_pairs_runs_by_seed(tmp_path, capsys):
    write_runs(tmp_path, {"ot": [0.80, 0.85, 0.90], "soft_kmeans": [0.70, 0.72, 0.95]})
    out = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans")
    assert out["n_paired"] == 3 and out["paired_diff"] == pytest.approx(np.mean([0.10, 0.13, -0.05]))
    assert out["paired_p"] == pytest.approx(stats.ttest_rel([0.80, 0.85, 0.90], [0.70, 0.72, 0.95]).pvalue)
    # The 95% interval of the mean difference by its textbook formula: mean ± t(0.975, n - 1) sd / sqrt(n).
    half = stats.t.ppf(0.975, 2) * np.std([0.10, 0.13, -0.05], ddof=1) / np.sqrt(3)
    assert (out["paired_ci_low"], out["paired_ci_high"]) == pytest.approx((out["paired_diff"] - half, out["paired_diff"] + half))
    at_epoch = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", epoch=0)
    assert at_epoch["mean_a"] == pytest.approx(np.mean([0.80, 0.85, 0.90]) / 3)  # the curves' first epoch
    # b at its own epoch (two pre-trainings of different lengths, each read at its switch): a's last against b's first.
    mixed = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", epoch_b=0)
    assert mixed["paired_diff"] == pytest.approx(np.mean([0.80 - 0.70 / 3, 0.85 - 0.72 / 3, 0.90 - 0.95 / 3]))
    assert mixed["mean_a"] == out["mean_a"]
    table = experiments.compare_table([{"a": f"{tmp_path}:mnist_ot", "b": f"{tmp_path}:mnist_soft_kmeans",
                                        "epoch": 1, "epoch_b": 0}])
    assert f"| epoch 1 vs 0 | 3 | {np.mean([0.80, 0.85, 0.90]) * 2 / 3:.3f} (3) | {np.mean([0.70, 0.72, 0.95]) / 3:.3f} (3) |" \
        in table
    assert experiments.main(["compare", "--a", f"{tmp_path}:mnist_ot", "--b", f"{tmp_path}:mnist_soft_kmeans",
                             "--epoch_b", "0"]) == 0
    assert f"at final vs 0: a 0.850 (3 runs), b {np.mean([0.70, 0.72, 0.95]) / 3:.3f} (3 runs)" in capsys.readouterr().out
    # Each run at its lowest epoch (here the first, a third of the final): the worst a run passed through.
    lowest = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", epoch="lowest", epoch_b=2)
    assert lowest["paired_diff"] == pytest.approx(np.mean([0.80 / 3 - 0.70, 0.85 / 3 - 0.72, 0.90 / 3 - 0.95]))
    assert experiments.main(["compare", "--a", f"{tmp_path}:mnist_ot", "--b", f"{tmp_path}:mnist_soft_kmeans",
                             "--epoch", "lowest"]) == 0
    assert "at epoch lowest: a 0.283 (3 runs)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        experiments.main(["compare", "--a", f"{tmp_path}:mnist_ot", "--b", f"{tmp_path}:mnist_ot", "--epoch", "worst"])
    assert "or 'lowest', got 'worst'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no runs of mnist_ot with settings"):
        experiments.compare(f"{tmp_path}:mnist_ot:epsilon=1", f"{tmp_path}:mnist_ot")
    missing = r"mnist_ot__seed=0 logged no val/ari at epoch 0 \(there: \['train/loss', 'val/acc'\]\)"
    with pytest.raises(ValueError, match=missing):  # a key the curves lack: named, not a KeyError
        experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", key="val/ari", epoch=0)
    # A claimed difference: against 0 it is the paired test above (ttest_rel against ttest_1samp of the differences);
    # against the observed mean it cannot be rejected.
    assert experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", against=0.0)["against_p"] \
        == pytest.approx(out["paired_p"])
    assert experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans",
                               against=out["paired_diff"])["against_p"] == pytest.approx(1.0)
    # Some seeds only (those that chose nothing): seeds 1-2 are the paired test of those two pairs alone.
    fresh = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", seeds="1-2")
    assert (fresh["n_paired"], fresh["n_a"]) == (2, 2) and fresh["paired_diff"] == pytest.approx(np.mean([0.13, -0.05]))
    assert fresh["paired_p"] == pytest.approx(stats.ttest_rel([0.85, 0.90], [0.72, 0.95]).pvalue)
    with pytest.raises(ValueError, match="on seeds 5-9"):
        experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", seeds="5-9")


def test_compare_selects_a_grid_point_whose_value_is_a_list(tmp_path):
    """A list value keeps its commas (``hidden_dims=[500,250]``): the spec names one grid point, not three tags."""
    for dims, accs in [("[500,250]", [0.70, 0.75]), ("[500,500,2000]", [0.78, 0.80])]:
        write_runs(tmp_path, {"ae_kmeans": accs})
        for seed in range(2):
            path = tmp_path / f"mnist_ae_kmeans__seed={seed}.json"
            record = json.loads(path.read_text())
            record["grid"] = {"model.autoencoder.init_args.hidden_dims": dims, "model.lr": "0.001"}
            record["name"] = f"mnist_ae_kmeans__hidden_dims={dims}__lr=0.001__seed={seed}"
            (tmp_path / f"{record['name']}.json").write_text(json.dumps(record))
            path.unlink()
    out = experiments.compare(f"{tmp_path}:mnist_ae_kmeans:hidden_dims=[500,500,2000],lr=0.001",
                              f"{tmp_path}:mnist_ae_kmeans:lr=0.001,hidden_dims=[500,250]")
    assert out["n_paired"] == 2 and out["paired_diff"] == pytest.approx(np.mean([0.08, 0.05]))


def test_compare_table_says_over_which_runs_each_mean_is(tmp_path):
    # a has a seed b lacks: the difference is over the 3 shared seeds, the means over all runs of each (Welch's).
    write_runs(tmp_path, {"ot": [0.80, 0.85, 0.90, 0.60], "soft_kmeans": [0.70, 0.72, 0.95]})
    out = experiments.compare(f"{tmp_path}:mnist_ot", f"{tmp_path}:mnist_soft_kmeans", quiet=True)
    assert (out["n_paired"], out["n_a"], out["n_b"]) == (3, 4, 3)
    assert out["paired_diff"] == pytest.approx(np.mean([0.10, 0.13, -0.05]))
    row = experiments.compare_table([{"a": f"{tmp_path}:mnist_ot", "b": f"{tmp_path}:mnist_soft_kmeans"}])
    assert out["mean_a"] == pytest.approx(np.mean([0.80, 0.85, 0.90, 0.60]))
    assert f"| 3 | {out['mean_a']:.3f} (4) | {out['mean_b']:.3f} (3) | +0.060 ± " in row


def test_the_papers_pvalues_are_recomputed_from_its_table_1():
    """Welch's test from Table 1's means and stds (50 runs a column): MNIST's OT against soft k-means gives t = 6.31,
    p = 8.2e-9 two-sided, where the paper prints 1e-12, outside what its rounded numbers allow; its pre-trained
    p-values (0.10, 0.33) are the one-sided tests' (0.11, 0.30), not the two-sided ones' (0.22, 0.60). Checked
    against scipy's ttest_ind on samples with exactly those means and stds."""
    rows = {(r["dataset"], r["a"], r["b"]): r for r in experiments.paper_pvalues()}
    assert len(rows) == 8
    main = rows["mnist", "ot", "soft_kmeans"]
    assert (main["diff"], main["t"], main["p_two"]) == pytest.approx((0.041, 6.31, 8.2e-9), rel=1e-2)
    assert main["reported"] == "1e-12" and main["p_two_range"][0] > 1e-12
    assert rows["mnist", "ot_p", "soft_kmeans_p"]["p_one"] == pytest.approx(0.11, abs=0.005)
    assert rows["mnist", "ot_p", "soft_kmeans_p"]["p_two"] == pytest.approx(0.22, abs=0.005)
    assert rows["cifar10", "ot_p", "soft_kmeans_p"]["p_one"] == pytest.approx(0.30, abs=0.005)
    assert rows["cifar10", "ot_p", "soft_kmeans_p"]["p_two"] == pytest.approx(0.60, abs=0.005)
    cifar = rows["cifar10", "ot", "soft_kmeans"]  # the printed 0.0067 lies within what rounding allows
    assert cifar["p_two_range"][0] < 0.0067 < cifar["p_two_range"][1]
    for r in rows.values():
        assert r["p_two_range"][0] <= r["p_two"] <= r["p_two_range"][1]
        assert r["p_one_range"][0] <= r["p_one"] <= r["p_one_range"][1]
        # A second code path: 50 values with exactly the printed mean and std (ddof=1) a column.
        z = np.random.default_rng(0).normal(size=(2, 50))
        z = (z - z.mean(1, keepdims=True)) / z.std(1, ddof=1, keepdims=True)
        (ma, sa), (mb, sb) = experiments.PAPER[r["dataset"]][r["a"]][:2], experiments.PAPER[r["dataset"]][r["b"]][:2]
        sample_a, sample_b = ma + sa * z[0], mb + sb * z[1]
        assert stats.ttest_ind(sample_a, sample_b, equal_var=False).pvalue == pytest.approx(r["p_two"], rel=1e-6)
        assert stats.ttest_ind(sample_a, sample_b, equal_var=False, alternative="greater").pvalue \
            == pytest.approx(r["p_one"], rel=1e-6)


def test_claims_and_table_carry_dkms_form_only_where_it_has_records(tmp_path):
    """The claims table pairs ours by seed beside the paper's recomputed tests, one row per settings group; OT against
    DKM's form of soft k-means gets a row once that form has records, and Table 1 puts that form beside soft k-means
    with the paper's DKM."""
    ot, skm, dkm = [0.80, 0.85, 0.90], [0.70, 0.72, 0.95], [0.75, 0.70, 0.81]
    write_runs(tmp_path, {"ot": ot, "soft_kmeans": skm})
    groups = {"mnist": {"shipped: tagged": {"ot": "clustering_weight=0.1"}, "before: untagged": {}}}
    text = experiments.claims({"mnist": tmp_path}, groups)
    shipped, before = [line for line in text.splitlines() if line.startswith("| mnist | ot | soft_kmeans |")]
    diff = np.subtract(ot, skm)
    ci = stats.ttest_rel(ot, skm).confidence_interval(0.95)
    assert f"| before | `{tmp_path}` | 3 (0-2) | {diff.mean():+.3f} ± {diff.std(ddof=1):.3f} " \
           f"[{ci.low:+.3f}, {ci.high:+.3f}] | {stats.ttest_rel(ot, skm).pvalue:.2g} |" in before
    assert "| 8.2e-09 [" in shipped and "| 1e-12 |" in shipped and "8.2e-09" not in before
    assert "| shipped | " in shipped and shipped.endswith("| 0 | no runs | |")  # no OT run at lambda = 0.1
    assert "| mnist | ot_p | soft_kmeans_p |" in text and "| 0 | no runs |" in text
    assert "DKM" not in text.split("\n\n", 1)[1] and "cifar10 | ot | soft_kmeans |" in text
    write_runs(tmp_path, {"soft_kmeans_dkm": dkm[:1]})  # one seed: its difference, no test
    assert "| soft_kmeans_dkm (DKM's form) | +0.041 | 1e-12 |" in experiments.claims({"mnist": tmp_path}, groups)
    assert f"| 1 (0) | {ot[0] - dkm[0]:+.3f} | — |" in experiments.claims({"mnist": tmp_path}, groups)
    write_runs(tmp_path, {"soft_kmeans_dkm": dkm})
    text = experiments.claims({"mnist": tmp_path}, groups)
    row = [line for line in text.splitlines() if "soft_kmeans_dkm (DKM's form)" in line][-1]
    assert row.startswith("| mnist | ot |") and f"{stats.ttest_rel(ot, dkm).pvalue:.2g} |" in row
    assert "soft_kmeans_dkm_p" not in text  # no records of the pre-trained form: no row
    table = experiments.table(str(tmp_path), baselines=None)
    rows = [line for line in table.splitlines() if line.startswith("| mnist | ")]
    assert [r.split(" | ")[1] for r in rows[:3]] == ["soft_kmeans", "soft_kmeans_dkm", "ot"]
    assert rows[1].endswith("| 0.810 (± 0.033) | [0.677, 0.883] |")
    assert f"| ot | soft_kmeans_dkm | {np.mean(ot) - np.mean(dkm):+.3f} | " \
           f"{stats.ttest_ind(ot, dkm, equal_var=False).pvalue:.3g} |" in table


def test_table_1_puts_each_column_in_the_row_group_of_its_settings(tmp_path):
    """table1: a column's runs sit in the group whose tags they carry, with their seeds, mean, std and range (numpy)
    and the paper's numbers; a column shown once is not repeated in a later group; a group without runs is a header."""
    write_runs(tmp_path, {"ot": [0.80, 0.84, 0.90], "ae_kmeans": [0.7, 0.8]})
    tagged = json.loads((tmp_path / "mnist_ot__seed=2.json").read_text())
    tagged.update(name="mnist_ot__clustering_weight=0.1__seed=7", seed=7, grid={"model.clustering_weight": "0.1"})
    (tmp_path / f"{tagged['name']}.json").write_text(json.dumps(tagged))
    groups = {"shipped": {"ot": "clustering_weight=0.1"}, "before": {}}
    text = experiments.table1(tmp_path, "mnist", groups, baselines=None)
    lines = text.splitlines()
    shipped, before = lines.index("| **shipped** | | | | | | | |"), lines.index("| **before** | | | | | | | |")
    ot_rows = [i for i, line in enumerate(lines) if line.startswith("| OT |")]
    assert len(ot_rows) == 2 and shipped < ot_rows[0] < before < ot_rows[1]
    assert lines[ot_rows[0]].startswith("| OT | clustering_weight=0.1 | 7 | 0.900 | [0.900, 0.900] |")
    acc = np.array([0.80, 0.84, 0.90])
    assert lines[ot_rows[1]].startswith(f"| OT |  | 0-2 | {acc.mean():.3f} (± {acc.std(ddof=1):.3f}) | [0.800, 0.900] |")
    assert lines[ot_rows[1]].endswith("| 0.851 (± 0.032) [0.771, 0.932] |")
    assert sum(line.startswith("| AE + k-means |") for line in lines) == 1  # untagged in both groups: shown once
    assert experiments.table1(tmp_path, "mnist", {"empty": {"ot": "epsilon=9"}}, baselines=None).count("| OT |") == 0


def test_the_shipped_settings_are_what_the_shipped_configs_set():
    """SETTINGS' first group names, per column, the settings its configs/<data>_<column>.yaml sets (so a record
    named by them is a run of the shipped config); the configs before are their untagged runs."""
    for dataset, groups in experiments.SETTINGS.items():
        shipped = next(iter(groups.values()))
        for method in experiments.METHODS[1:]:
            path = REPO / "configs" / f"{dataset}_{method}.yaml"
            if not path.exists():
                continue
            model = yaml.safe_load(path.read_text())["model"]
            for tag in filter(None, shipped.get(method, "").split(",")):
                key, value = tag.split("=")
                moved = (legacy.MOVED | legacy.MOVED_OT).get(f"model.{key}")  # a setting of the loss today
                assert str(model["loss"]["init_args"].get(moved) if moved else model.get(key)) == value, (path.name, key)
        if dataset == "mnist":
            assert str(yaml.safe_load((REPO / "configs" / "mnist_ot.yaml").read_text())["model"]["clustering_weight"]) \
                == "0.1"
    assert set(experiments.SETTINGS["mnist"]["the shipped configs: lambda = 0.1, OT's fixed solve"]) \
        == set(experiments.METHODS[2:])


def test_the_power_of_the_paired_test_matches_its_limits_and_a_simulation():
    """paired_power: the test's level when there is no difference; the normal approximation
    Phi(d sqrt(n) / sd - z) + Phi(-d sqrt(n) / sd - z) with many pairs; and, with few pairs, the rejection rate of
    scipy's ttest_1samp on simulated normal differences (20,000 draws, ± 0.01)."""
    assert experiments.paired_power(0.0, 0.04, 10) == pytest.approx(0.05)
    z, nc = stats.norm.ppf(0.975), 0.01 * np.sqrt(400) / 0.05
    assert experiments.paired_power(0.01, 0.05, 400) == pytest.approx(stats.norm.cdf(nc - z) + stats.norm.cdf(-nc - z),
                                                                      abs=2e-3)
    rng = np.random.default_rng(0)
    draws = rng.normal(0.041, 0.038, size=(20_000, 10))
    rate = np.mean(stats.ttest_1samp(draws, 0.0, axis=1).pvalue < 0.05)
    assert experiments.paired_power(0.041, 0.038, 10) == pytest.approx(rate, abs=0.01)
    # Pairs far tighter than the difference: power 1, in both directions (scipy's lower tail alone gives nan).
    assert experiments.paired_power(0.041, 0.005, 5) == pytest.approx(1.0)
    assert experiments.paired_power(-0.041, 0.002, 5) == pytest.approx(1.0)


def test_figure2_points_put_runs_without_the_grid_key_at_the_configs_value(tmp_path):
    """Figure 2 from a protocol folder: the epsilon-grid runs at their epsilon, the protocol's runs (no grid) at
    ``grid_default``; the PNGs are written, and Figure 1 draws only the runs without the grid key."""
    write_runs(tmp_path, {"ot": [0.8, 0.9]})
    for seed, acc in enumerate([0.3, 0.5]):
        record = json.loads((tmp_path / f"mnist_ot__seed={seed}.json").read_text())
        record.update(name=f"mnist_ot__epsilon=1__seed={seed}", grid={"model.epsilon": "1"}, final={"val/acc": acc})
        (tmp_path / f"{record['name']}.json").write_text(json.dumps(record))
    records = experiments.load(str(tmp_path))
    points = experiments.grid_points(records, "mnist", "val/acc", "model.epsilon", 0.01)
    assert {k: sorted(v) for k, v in points["ot"].items()} == {0.01: pytest.approx([0.8, 0.9]), 1.0: [0.3, 0.5]}
    assert dict(experiments.grid_points(records, "mnist", "val/acc", "model.epsilon", None)["ot"]) == {1.0: [0.3, 0.5]}
    # Seeds and methods the sweep has not run stay off the figure: every point of a curve averages the same seeds.
    # Nor does a run that changes another setting: it is not at the config's epsilon as the protocol ran it.
    write_runs(tmp_path, {"ot": [0.8, 0.9, 0.1], "ae_kmeans": [0.7]})
    other = json.loads((tmp_path / "mnist_ot__seed=0.json").read_text())
    other.update(name="mnist_ot__sinkhorn_solver=fixed__seed=0", grid={"model.sinkhorn_solver": "fixed"},
                 final={"val/acc": 0.2})
    (tmp_path / f"{other['name']}.json").write_text(json.dumps(other))
    points = experiments.grid_points(experiments.load(str(tmp_path)), "mnist", "val/acc", "model.epsilon", 0.01)
    assert set(points) == {"ot"} and {k: sorted(v) for k, v in points["ot"].items()} == {
        0.01: pytest.approx([0.8, 0.9]), 1.0: [0.3, 0.5]}
    written = experiments.figures(str(tmp_path), grid_key="model.epsilon", grid_default=0.01)
    assert [Path(p).name for p in written] == ["figure1_mnist.png", "figure2_mnist.png"]
    assert not (tmp_path / "figure2_mnist.md").exists()  # figures() draws; report_folder() writes the numbers
    experiments.main(["report", "--out", str(tmp_path), "--grid_key", "model.epsilon", "--grid_default", "0.01"])
    # The figure's numbers as tables: numpy's population std, as the error bars; seed 2 has no grid run, so no row.
    table = (tmp_path / "figure2_mnist.md").read_text().splitlines()
    assert "| ot | 0.850 ± 0.050 (2) | 0.400 ± 0.100 (2) |" in table
    assert [line for line in table if line.startswith("| ot | ")][1:] == ["| ot | 0 | 0.800 | 0.300 |",
                                                                          "| ot | 1 | 0.900 | 0.500 |"]


def test_the_proxy_check_leaves_out_grid_runs(tmp_path):
    """The proxy check compares runs of the configs' own settings: Figure 2's runs at other epsilons, in the same
    folder, must not enter its table, its Spearman correlation or its method means (they did once)."""
    write_runs(tmp_path, {"ot": [0.8, 0.7, 0.9], "soft_kmeans": [0.75, 0.8, 0.7]})
    for seed in range(3):
        record = json.loads((tmp_path / f"mnist_ot__seed={seed}.json").read_text())
        record.update(name=f"mnist_ot__epsilon=1__seed={seed}", grid={"model.epsilon": "1"})
        (tmp_path / f"{record['name']}.json").write_text(json.dumps(record))
    out = experiments.proxy_check(str(tmp_path), at=1)
    assert out.count("| mnist_ot | ") == 3 + 1  # a row per seed, and the method's means
    assert "over the 6 runs" in out
    rho = stats.spearmanr([0.8 * 2 / 3, 0.7 * 2 / 3, 0.9 * 2 / 3, 0.5, 0.8 * 2 / 3, 0.7 * 2 / 3],
                          [0.8, 0.7, 0.9, 0.75, 0.8, 0.7]).statistic
    assert f"over the 6 runs: {rho:.2f}" in out


def test_the_confusion_report_names_the_classes_a_cluster_mixes():
    """Cluster 0 holds all of class 0 and 30% of class 1, cluster 1 the other 70%: 1>0 30%, accuracy 170 / 200."""
    counts = {"counts": [[100, 30], [0, 70]], "matched_class": [0, 1]}
    record = {"seed": 0, "method": "ot", "grid": {}, "confusion": {"9": counts}}
    text = experiments.confusion_report([record], ["ot"], [9, 19], share=0.15, source="test")
    assert "| 0 | ot | 0.850: 1>0 30% | — |" in text
    # A grid point's runs, named by their tags: only they, and only when asked for.
    tagged = {**record, "seed": 1, "grid": {"model.clustering_weight": "0.1"},
              "confusion": {"9": {"counts": [[100, 0], [0, 100]], "matched_class": [0, 1]}}}
    assert "| 1 |" not in experiments.confusion_report([record, tagged], ["ot"], [9], source="test")
    text = experiments.confusion_report([record, tagged], ["ot"], [9], source="test", tags={"ot": "clustering_weight=0.1"})
    assert "| 1 | ot | 1.000: clean |" in text and "| 0 |" not in text


@pytest.mark.slow
def test_the_committed_notebook_is_executed_current_and_small():
    """notebooks/results.ipynb, executed again from the committed records, runs without an error and shows what its
    committed outputs show (tables and printed lines; figures are compared by count), in at most 1 MB."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("execute_notebook", REPO / "scripts" / "execute_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = REPO / "notebooks" / "results.ipynb"
    assert path.stat().st_size <= 1_000_000
    committed = nbformat.read(path, as_version=4)
    fresh = module.execute(path)

    def shown(nb):
        outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        text = [o.get("text", "") or o.get("data", {}).get("text/markdown", "") for o in outputs]
        return [t for t in text if t], sum("image/png" in o.get("data", {}) for o in outputs)

    text, images = shown(fresh)
    assert images >= 3 and any("| mnist | ot | soft_kmeans |" in t for t in text)
    assert shown(committed) == (text, images), "re-run `python scripts/execute_notebook.py` and commit the notebook"


@pytest.mark.slow
def test_report_regenerates_every_table_and_figure_results_md_cites(tmp_path, monkeypatch):
    """Every table, text and figure RESULTS.md cites in a study's folder is what `report STUDY` writes, the tables
    word for word as committed (a stale table, or one no report writes, fails); the files outside the studies'
    folders (probe and script outputs, each naming its command) exist."""
    text = (REPO / "RESULTS.md").read_text()
    cited = set(re.findall(r"`(results/[^`\s]+\.(?:md|txt|png))`", text)) | set(re.findall(r"\((results/\S+\.png)\)", text))
    assert "results/protocol/table1.md" in cited
    shutil.copytree(REPO / "results", tmp_path / "results")
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    by_folder = {}
    for path in sorted(STUDIES.glob("*.yaml")):
        study = experiments.load_study(f"configs/studies/{path.name}")
        for folder in [study.out, *study.folders]:
            by_folder.setdefault(str(folder), study)
    in_studies = {c for c in cited if str(Path(c).parent) in by_folder}
    for c in cited - in_studies:
        assert (REPO / c).is_file(), c
    written = set()
    for study in {id(by_folder[str(Path(c).parent)]): by_folder[str(Path(c).parent)] for c in in_studies}.values():
        written |= {str(p) for p in experiments.report(study)}
    assert in_studies <= written, sorted(in_studies - written)
    for c in sorted(in_studies):
        if not c.endswith(".png"):
            assert (tmp_path / c).read_text() == (REPO / c).read_text(), f"{c} is stale: rerun its study's report"


def test_a_run_another_runner_holds_is_skipped_not_run_twice(tmp_path):
    """Two runners of one study pick the same run without a record; the one that does not hold its lock skips it
    (no fit started, nothing written in its folder) and leaves the holder's attempt alone."""
    run = studies.Run(config="configs/smoke.yaml", seed=0, grid={}, fixed={}, out=tmp_path)
    run.root.mkdir(parents=True)
    with open(run.root / "running.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with runner._forward_sigterm():  # as the runner calls it (a stop left by an earlier test is cleared)
            status, line = runner.execute(run, None)
    assert (status, line) == (0, f"skip {run.name}: running in another process")
    assert sorted(p.name for p in run.root.iterdir()) == ["running.lock"]
    assert not run.done
    # the lock went with its holder: a finished record is now seen and skipped without a fit
    run.record.write_text("{}\n")
    assert runner.execute(run, None) == (0, f"skip {run.name}")


def test_a_curve_scored_every_10_epochs_is_drawn_through_its_points():
    # A pre-training record scores k-means every 10 epochs (NaN between): drawn with the gaps, it showed nothing.
    from lit_otclust.lab import reports

    nan = float("nan")
    a = [nan] * 30
    b = [nan] * 31  # a longer run: its epoch 30 is past what every run reached
    a[9], a[19], a[29], b[9], b[19], b[29], b[30] = 0.5, 0.6, 0.7, 0.7, nan, 0.9, 1.0
    epochs, mean, std = reports.mean_curve([a, b])
    assert epochs.tolist() == [9, 19, 29]
    assert mean == pytest.approx([0.6, 0.6, 0.8]) and std == pytest.approx([np.std([0.5, 0.7]), 0.0, 0.1])
    full = [[0.1, 0.2, 0.3], [0.3, 0.4, 0.5]]  # scored every epoch: every epoch kept, numpy's mean and std
    epochs, mean, std = reports.mean_curve(full)
    assert epochs.tolist() == [0, 1, 2] and mean == pytest.approx(np.mean(full, 0)) and std == pytest.approx(
        np.std(full, 0))


@pytest.mark.parametrize("series", [3, 40])
def test_a_figures_legend_never_covers_its_curves(tmp_path, series):
    # A study folder draws one curve per variant (study_recipe: 33): past 8 the legend goes below the axes.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from lit_otclust.lab import reports

    fig, ax = plt.subplots(figsize=(6, 4))
    for i in range(series):
        ax.plot(range(40), np.linspace(0.1, 0.8, 40) + 0.001 * i, label=f"variant {i} with a long grid tag")
    reports._save(fig, ax, tmp_path / "f.png")
    renderer = FigureCanvasAgg(fig).get_renderer()  # _save closed the figure's own canvas
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    if series > 8:
        assert legend.y1 < axes.y0  # wholly below the axes, the figure taller for it
        assert fig.get_size_inches()[1] > 4 + 0.17 * series - 1e-6
    else:
        assert axes.contains(legend.x0, legend.y0) and axes.contains(legend.x1, legend.y1)  # inside, as before
    assert (tmp_path / "f.png").stat().st_size > 0


@pytest.mark.slow
def test_a_studys_fits_are_wandb_runs_grouped_by_study_column_and_seed(data_dir, tmp_path, monkeypatch, capsys):
    """With W&B on, each fit of a study is an offline run whose file (read back, not the logger's arguments) names the
    study as its group, the column (config and grid point) as its job type, its seed and grid settings as tags, and
    names the study file in its config; ``sync --dry-run`` names every offline run."""
    from _wandb_log import wait_for_exit

    monkeypatch.chdir(REPO)
    study_file = tmp_path / "tiny_study.yaml"
    spec = {"out": str(tmp_path / "out"), "seeds": [0], "epochs": 2, "configs": ["configs/smoke.yaml"],
            "grid": {"model.epsilon": [0.05]}, "set": {"data.data_dir": str(data_dir)}}
    study_file.write_text(yaml.safe_dump(spec))
    study = studies.load_study(study_file)
    assert runner.run_local(study, jobs=1, gpus=[], wandb=True) == 0
    (run,) = study.runs
    (offline,) = runner.offline_wandb_runs(study)
    (run_file,) = offline.glob("run-*.wandb")
    records = wait_for_exit(run_file)
    # The fit owned its W&B service and finished its run, though this process had started one (an earlier test's).
    assert any(r.WhichOneof("record_type") == "exit" for r in records), "the fit's W&B run never finished"
    first, *updates = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (first.run_group, first.job_type, first.display_name) == ("tiny_study", "smoke__epsilon=0.05", run.name)
    tags = set(first.tags).union(*(u.tags for u in updates))
    assert {"seed=0", "epsilon=0.05", "ot_p", "MNISTDataModule"} <= tags
    config = {item.key: json.loads(item.value_json) for r in records
              if r.WhichOneof("record_type") == "config" for item in r.config.update}
    config.update({item.key: json.loads(item.value_json) for item in first.config.update})
    # The old flag of the study (model.epsilon) ran as the loss's (translate).
    assert config["wandb"]["study"] == str(study_file) and "study" not in config
    assert config["model"]["loss"]["init_args"]["epsilon"] == 0.05
    record = json.loads(run.record.read_text())
    assert record["cpu"] and record["cpu"] in Path("/proc/cpuinfo").read_text() and record["gpu"] is None
    capsys.readouterr()
    assert experiments.main(["sync", str(study_file), "--dry-run"]) == 0
    command = shlex.split(capsys.readouterr().out)
    assert Path(command[0]).name == "wandb" and command[1:] == ["sync", str(offline)]


def test_wandb_tags_and_job_types_longer_than_wandbs_limit_stay_distinct():
    """W&B refuses tags over 64 characters: long ones are cut with a hash, so two long grid points stay apart."""
    a = studies.Run("configs/mnist_ot.yaml", 3, {"model.proportions": "[" + ",".join(["0.1"] * 10) + "]"}, {}, Path("x"))
    b = studies.Run("configs/mnist_ot.yaml", 3, {"model.proportions": "[" + ",".join(["0.1"] * 9) + ",0.2]"}, {}, Path("x"))
    args_a, args_b = runner.wandb_args(a, None), runner.wandb_args(b, None)
    values_a = dict(zip(args_a[::2], args_a[1::2]))
    values_b = dict(zip(args_b[::2], args_b[1::2]))
    tags_a, tags_b = json.loads(values_a["--wandb.tags"]), json.loads(values_b["--wandb.tags"])
    assert tags_a[0] == "seed=3" and all(len(t) <= 64 for t in tags_a + tags_b) and tags_a[1] != tags_b[1]
    assert len(values_a["--wandb.job_type"]) <= 64 and values_a["--wandb.job_type"] != values_b["--wandb.job_type"]
    assert values_a["--wandb.group"] == "x" and "--wandb.study" not in values_a


def test_a_dry_run_piped_into_head_stops_without_a_traceback():
    """`run STUDY --dry-run | head -1`: the reader closes the pipe after one line of 250; the runner stops quietly."""
    proc = subprocess.run(f"python -m lit_otclust.experiments run {STUDIES / 'paper_protocol.yaml'} --dry-run | head -1",
                          shell=True, cwd=REPO, capture_output=True, text=True, executable="/bin/bash")
    assert proc.stdout.startswith("python -m lit_otclust fit --config") and proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_an_archived_study_names_the_commit_that_runs_it(tmp_path, monkeypatch, capsys):
    """A study with ``runs_at``: ``run --dry-run`` says where it runs and exits 0, ``run`` says so and starts nothing;
    every committed study either builds today's commands or is archived, and every archived one still reports."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.yaml").write_text("seed_everything: 0\n")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"out": "res", "configs": ["a.yaml"], "runs_at": "093e9ce14e"}))
    assert experiments.main(["run", "s.yaml", "--dry-run"]) == 0
    assert "s.yaml is archived" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        experiments.main(["run", "s.yaml", "--jobs", "2"])
    assert stop.value.code == 2 and "commit 093e9ce runs it" in capsys.readouterr().err
    assert not (tmp_path / "res").exists()
    monkeypatch.chdir(REPO)
    archived = []
    for path in sorted(STUDIES.glob("*.yaml")):
        study = studies.load_study(path)
        if study.archived:
            archived.append(path.stem)
            assert study.runs_at.startswith(legacy.LAST_FLAT_COMMIT[:7]) and list(experiments.load(study.out))
        else:
            [run.command() for run in study.runs]  # raises on an option retired since
    assert archived == ["study_anneal", "study_recipe", "study_scale"]


def test_a_record_is_selected_by_its_grid_as_its_study_wrote_it_or_as_it_took_effect(tmp_path):
    """A committed study's old flag (``model.lr``) runs translated (``model.optimizer.*``), and the record's ``grid`` says
    so; the study's report still names it ``lr=0.001``, as the run's name does. Both records are that grid point; the
    run without a grid is not."""
    from lit_otclust.lab.stats import select

    records = {"mnist_ot_p__lr=0.001__seed=0": {"model.lr": "0.001"},
               "mnist_ot_p__lr=0.001__seed=1": {"model.optimizer.class_path": "torch.optim.Adam",
                                                 "model.optimizer.init_args.lr": "0.001"},
               "mnist_ot_p__seed=0": {}}
    for name, grid in records.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"name": name, "config": "mnist_ot_p", "seed": int(name[-1]), "grid": grid, "final": {}}))
    assert sorted(r["seed"] for r in select(f"{tmp_path}:mnist_ot_p:lr=0.001")) == [0, 1]
    assert [r["name"] for r in select(f"{tmp_path}:mnist_ot_p")] == ["mnist_ot_p__seed=0"]
    with pytest.raises(ValueError, match="no runs"):
        select(f"{tmp_path}:mnist_ot_p:lr=0.01")


def test_a_translated_grid_takes_the_values_the_command_ran(tmp_path, monkeypatch):
    """``grid: {model.optimizer: [sgd]}`` with ``set: {model.lr: 0.5}``: the record's grid names SGD at the lr the
    command gave (0.5), not the config's default, and stays part of the record's settings."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.yaml").write_text("seed_everything: 0\n")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"out": "res", "configs": ["a.yaml"], "set": {"model.lr": 0.5},
                                                     "grid": {"model.optimizer": ["sgd"]}}))
    run = studies.load_study("s.yaml").runs[0]
    assert run.name == "a__optimizer=sgd__seed=0"
    assert run.grid_settings == {"model.optimizer.class_path": "torch.optim.SGD",
                                 "model.optimizer.init_args.lr": "0.5", "model.optimizer.init_args.momentum": "0.9"}
    assert run.grid_settings.items() <= run.settings.items()
