"""What a run prints when it ends (callbacks.RunSummary), checked against the files the run wrote."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest
import wandb

from lit_otclust.callbacks import resume_command
from lit_otclust.cli import main
from _runs import SMOKE


def test_the_resume_command_is_the_typed_one_with_ckpt_path_last():
    typed = ["fit", "--config", "runs dir/a.yaml", "--ckpt_path", "old.ckpt", "--trainer.max_epochs=5"]
    assert resume_command(typed) == ("python -m lit_otclust fit --config 'runs dir/a.yaml' --trainer.max_epochs=5 "
                                     "--ckpt_path last")
    assert shlex.split(resume_command(["fit", "--ckpt_path=x.ckpt"], "lit-otclust")) == [
        "lit-otclust", "fit", "--ckpt_path", "last"]


def _summary(text: str, title: str) -> dict[str, str]:
    """The ``name  value`` lines under the last ``title`` line the run printed."""
    starts = [m.end() for m in re.finditer(rf"^{title}\n", text, re.MULTILINE)]
    assert starts, f"no {title!r} line in the output:\n{text[-3000:]}"
    block = text[starts[-1]:]
    lines = {}
    for line in block.splitlines():
        match = re.match(r"  (\S+(?: val/acc)?) +(.+)$", line)
        if not match:
            break
        lines[match[1]] = match[2]
    return lines


def _scores(line: str) -> tuple[str, str, str, int]:
    acc, nmi, ari, epoch = re.fullmatch(r"(\S+)  nmi (\S+)  ari (\S+)  \(epoch (\d+)\)", line).groups()
    return acc, nmi, ari, int(epoch)


@pytest.mark.slow
def test_fit_and_predict_print_the_logged_scores_the_outputs_and_a_resume_command_that_works(data_dir, tmp_path,
                                                                                              capsys):
    typed = ["fit", "--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(tmp_path),
             "--figures.every_n_epochs", "0"]
    main(typed)
    wandb.finish()
    printed = _summary(capsys.readouterr().out, "fit finished")

    # The numbers are metrics.csv's, rounded to the 4 places printed.
    metrics = Path(printed["metrics"])
    assert metrics == next((tmp_path / "csv").glob("version_*/metrics.csv"))
    rows = [row for row in csv.DictReader(metrics.open()) if row["val/acc"]]
    def as_printed(row):
        return tuple(f"{float(row[k]):.4f}" for k in ("val/acc", "val/nmi", "val/ari")) + (int(row["epoch"]),)
    best = max(rows, key=lambda row: float(row["val/acc"]))  # the first of equals, as printed
    assert _scores(printed["last val/acc"]) == as_printed(rows[-1]) and int(rows[-1]["epoch"]) == 2
    assert _scores(printed["best val/acc"]) == as_printed(best)

    assert (Path(printed["checkpoints"]) / "last.ckpt").is_file()
    assert printed["figures"] == str(tmp_path / "figures") and any((tmp_path / "figures").glob("*_final.png"))
    run = Path(printed["W&B"].removeprefix("run").split()[0])
    assert run.parent == tmp_path / "wandb" and run.name.startswith("offline-run-")
    assert printed["resume"] == "python -m lit_otclust " + shlex.join([*typed, "--ckpt_path", "last"])

    # The printed command resumes the run: from last.ckpt (the finished run trains no further), with the scores
    # of the epochs before the resume.
    main(shlex.split(printed["resume"])[3:])
    wandb.finish()
    resumed = _summary(capsys.readouterr().out, "fit finished")
    assert resumed["last val/acc"] == printed["last val/acc"] and resumed["best val/acc"] == printed["best val/acc"]

    main(["predict", "--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(tmp_path),
          "--ckpt_path", str(tmp_path / "checkpoints" / "last.ckpt"), "--trainer.logger", "false",
          "--figures.final", "false"])
    printed = _summary(capsys.readouterr().out, "predict finished")
    path, count, accuracy = re.fullmatch(r"(\S+) \((\d+) rows, matched accuracy (\S+)\)",
                                         printed["predictions"]).groups()
    table = list(csv.DictReader(open(path)))
    assert Path(path) == tmp_path / "predictions.csv" and int(count) == len(table) == 1000
    assert accuracy == f"{sum(r['matched_class'] == r['label'] for r in table) / len(table):.4f}"
    assert "figures" not in printed  # figures.final false: none drawn by this run


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_prints_how_to_resume_and_the_resumed_run_keeps_the_best_of_both(data_dir, tmp_path,
                                                                                                  capsys):
    run = ["fit", "--config", SMOKE, "--data.data_dir", str(data_dir), "--trainer.default_root_dir", str(tmp_path),
           "--figures.every_n_epochs", "0", "--figures.final", "false"]
    typed = [*run, "--trainer.callbacks+=test_cli.SignalAt", "--trainer.callbacks.epoch", "1",
             "--trainer.callbacks.batch", "3"]
    with pytest.raises(SystemExit) as stop:
        main(typed)
    wandb.finish()
    assert stop.value.code == 143
    printed = _summary(capsys.readouterr().out, "fit stopped")
    assert _scores(printed["last val/acc"])[3] == 0  # epoch 0 was evaluated, epoch 1 stopped inside
    assert printed["resume"] == "python -m lit_otclust " + shlex.join([*typed, "--ckpt_path", "last"])

    # Resumed without the signal: the best counts the epoch before the stop, logged in the first run's metrics.csv.
    main([*run, "--ckpt_path", "last"])
    wandb.finish()
    printed = _summary(capsys.readouterr().out, "fit finished")
    rows = [row for path in sorted((tmp_path / "csv").glob("version_*/metrics.csv"))
            for row in csv.DictReader(path.open()) if row["val/acc"]]
    assert [int(row["epoch"]) for row in rows] == [0, 1, 2]
    best = max(rows, key=lambda row: float(row["val/acc"]))
    expected = tuple(f"{float(best[k]):.4f}" for k in ("val/acc", "val/nmi", "val/ari")) + (int(best["epoch"]),)
    assert _scores(printed["best val/acc"]) == expected
    assert _scores(printed["last val/acc"])[3] == 2


def test_a_disabled_wandb_run_prints_no_wandb_line(tmp_path):
    """WANDB_MODE=disabled gives a run object without a page: the summary names no W&B run (it printed 'None')."""
    from types import SimpleNamespace

    from lightning.pytorch.loggers import WandbLogger

    from lit_otclust.callbacks import RunSummary

    wandb.finish()  # a run an earlier test left open would be reused by the logger
    # The mode as an argument: W&B's service, started by an earlier test, ignores a later WANDB_MODE.
    logger = WandbLogger(save_dir=str(tmp_path), mode="disabled")
    assert logger.experiment is not None  # the disabled run exists
    trainer = SimpleNamespace(loggers=[logger], checkpoint_callbacks=[], callbacks=[], default_root_dir=str(tmp_path))
    lines = dict(RunSummary(None, "python -m lit_otclust")._fit_lines(trainer))
    wandb.finish()
    assert "W&B run" not in lines and "val/acc" in lines
