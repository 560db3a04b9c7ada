"""Studies as data: a YAML file names a study's runs (:class:`Study`, :class:`Run`), which
:mod:`lit_otclust.lab.runner` runs, here or as a SLURM job array.

A study file (``configs/studies/NAME.yaml``)::

    out: results/study_recipe            # the records' folder, from the working directory
    seeds: 0-4                           # a list, one seed, or a range "first-last"
    epochs: 40                           # trainer.max_epochs, where not the configs' own
    set: {data.data_dir: ../shared/data}  # overrides given to every run
    runs:                                # blocks; a block takes every key above it does not set; its `set` wins
      - configs: [configs/mnist_ot.yaml, configs/mnist_soft_kmeans.yaml]
      - configs: [configs/mnist_ot.yaml]
        grid: {model.loss.init_args.reg_m: [0.2]}   # one run per value (several keys: their product)
        set: {model.lr_scheduler.init_args.gamma: 1.0}
        folder: no_decay                 # records in out/no_decay, for runs whose `set` differs from their neighbours'
    report: {grid_key: model.epsilon}    # what `experiments report` writes besides the table and Figure 1
    runs_at: 093e9ce                     # archived: only this commit runs it; `run` says so and starts nothing

A study without ``runs`` is one block. Config paths are read from the working directory, else from the study file's
folder. A run's record is ``<out>[/<folder>]/<config>__<key=value...>__seed=<s>.json``, the grid's settings named
by their keys' last component, sorted: a record name carries the grid, not ``set`` (hence ``folder``). Values are
passed as YAML reads them (``true`` as ``true``, a list as ``[a,b]``): quote one whose text matters (``"1e-3"``).
``{seed}`` in a ``set`` value is the run's seed: a per-seed file, e.g. the checkpoint of that seed's pre-training
(``model.autoencoder.init_args.weights: results/x/runs/mnist_ae_kmeans__seed={seed}/checkpoints/last.ckpt``).

A run whose record exists is skipped and an interrupted one resumes from its ``last.ckpt``, so a study is
finished by running it again. A record holds the run's settings (``settings``: every override its command gave, the grid's included), final
metrics and per-epoch curves (from the CSV log, so nothing depends on W&B), and what reproduces it: command, commit,
OMP_NUM_THREADS, torch version, study, and the CPU model (and GPU) that made it, as a rerun on another model differs
from the first epoch on; where its pre-training was another run's (the runner's shared pre-training), that run.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lit_otclust.lab.legacy import translate

CURVE_KEYS = ("val/acc", "val/acc_potential", "val/nmi", "val/ari", "heldout/acc", "train/loss",
              "train/recon", "train/cluster", "train/sinkhorn_iters", "train/plan_moved", "train/sinkhorn_unconverged",
              "val/size_min", "val/size_max", "val/size_error", "val/size_error_potential", "val/nmi_potential",
              "train/scale", "train/sinkhorn_error")
_BLOCK_KEYS = {"configs", "seeds", "epochs", "set", "grid", "folder"}
_STUDY_KEYS = _BLOCK_KEYS | {"out", "runs", "report", "runs_at"}


@dataclass(frozen=True)
class Run:
    """One fit of a study: a config, a seed, a grid point and the overrides every run of its block gets."""

    config: str  # as the command names it: relative to the working directory where possible
    seed: int
    grid: dict[str, str]
    fixed: dict[str, str]
    out: Path  # the folder of its record

    @property
    def tags(self) -> list[str]:
        """Its grid settings, ``key=value`` by the key's last component, sorted."""
        return [f"{key.split('.')[-1]}={value}" for key, value in sorted(self.grid.items())]

    @property
    def column(self) -> str:
        """Its config and grid point: the runs of one column of a table, which differ by seed only."""
        return "__".join([Path(self.config).stem, *self.tags])

    @property
    def name(self) -> str:
        return f"{self.column}__seed={self.seed}"

    @property
    def record(self) -> Path:
        return self.out / f"{self.name}.json"

    @property
    def root(self) -> Path:
        """Its logs and checkpoints."""
        return self.out / "runs" / self.name

    @property
    def settings(self) -> dict[str, str]:
        """The overrides its command gives, as they take effect: the block's and the study's ``set`` (``fixed``)
        with the grid point over them, a committed study's flags of before in today's form (:func:`translate`). A
        record states these, so it never shows a value that did not run."""
        fixed = {key: value.replace("{seed}", str(self.seed)) for key, value in self.fixed.items()}
        return translate(self.config, {**fixed, **self.grid})

    @property
    def grid_settings(self) -> dict[str, str]:
        """The grid point as it takes effect (:func:`translate`): the record's ``grid``, part of its ``settings``. The
        keys are those the grid's own flags become, the values the whole command's (a translated ``model.optimizer: sgd``
        in the grid takes its ``model.lr`` from the study's ``set``)."""
        settings = self.settings
        return {key: settings[key] for key in translate(self.config, self.grid) if key in settings}

    @property
    def done(self) -> bool:
        return self.record.exists()

    def command(self, python: str = "python") -> list[str]:
        """The fit command; ``--ckpt_path last`` where an interrupted attempt (no record) left a checkpoint."""
        cmd = [python, "-m", "lit_otclust", "fit", "--config", self.config, "--seed_everything", str(self.seed),
               "--trainer.default_root_dir", str(self.root), "--trainer.enable_progress_bar", "false",
               "--trainer.enable_model_summary", "false"]
        for key, value in self.settings.items():
            cmd += [f"--{key}", value]
        if not self.done and (self.root / "checkpoints" / "last.ckpt").exists():
            cmd += ["--ckpt_path", "last"]
        return cmd


@dataclass(frozen=True)
class Study:
    """A study file read: where it is, its output folder, its runs in order, and its report's options."""

    path: Path | None
    out: Path
    runs: list[Run]
    report: dict[str, Any] = field(default_factory=dict)
    runs_at: str | None = None  # an archived study: the commit whose code runs it (its options were retired since)

    @property
    def archived(self) -> str | None:
        """Why ``run`` starts nothing, for an archived study (``runs_at``): the commit and the commands that run it."""
        if self.runs_at is None:
            return None
        commit = self.runs_at[:7]
        return (f"{self.path or self.out} is archived: its runs name options retired since, and commit {commit} runs "
                f"it (git worktree add ../lit_otclust-{commit} {commit}, then `python -m lit_otclust.experiments run "
                f"{self.path}` there); its records and report stay in {self.out}")

    @property
    def folders(self) -> list[Path]:
        """The folders its records go to, in the order of its runs."""
        return list(dict.fromkeys(run.out for run in self.runs))

    def label(self, run: Run) -> str:
        """A run's record path without ``.json``, from the study's folder: what ``run --run`` takes."""
        return str((run.out / run.name).relative_to(self.out))

    def only(self, patterns: list[str]) -> "Study":
        """The runs whose label (:meth:`label`) matches one of the shell patterns, those of the first pattern first:
        ``["mnist_ot__seed=[0-4]", "*dkm*"]`` runs the paired seeds before the rest. A pattern matching no run is
        an error naming it (a typo would otherwise run nothing and say so quietly)."""
        picked = {pattern: [run for run in self.runs if fnmatch.fnmatchcase(self.label(run), pattern)]
                  for pattern in patterns}
        if missing := [pattern for pattern, runs in picked.items() if not runs]:
            raise ValueError(f"--only {missing[0]!r} matches no run of {self.path or self.out} "
                             f"(names as `run --dry-run` prints them, e.g. {self.label(self.runs[0])!r})")
        runs = {self.label(run): run for runs in picked.values() for run in runs}  # a run two patterns match: once
        return Study(self.path, self.out, list(runs.values()), self.report, self.runs_at)

    def find(self, label: str) -> Run:
        for run in self.runs:
            if self.label(run) == label:
                return run
        raise ValueError(f"no run {label!r} in {self.path or self.out}: the study file changed since its submission?")


def _text(value: Any) -> str:
    """A YAML value as the CLI reads it: ``true``, ``0.01``, ``[0.2,0.8]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return "null" if value is None else str(value)


def parse_seeds(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        first, sep, last = value.partition("-")
        if sep and first.strip().isdigit() and last.strip().isdigit():
            return list(range(int(first), int(last) + 1))
        raise ValueError(f"seeds {value!r} must be a list, one seed, or a range like '0-49'")
    return [int(s) for s in value]


def _config_path(config: str, base: Path | None) -> str:
    """``config`` from the working directory, else from the study file's folder; as the command names it."""
    for folder in (Path.cwd(), base):
        if folder is not None and (folder / config).is_file():
            path = (folder / config).resolve()
            return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    where = " or ".join(str(f) for f in (Path.cwd(), base) if f is not None)
    raise FileNotFoundError(f"config {config!r} not found from {where}")


def parse_study(spec: dict[str, Any], path: Path | None = None) -> Study:
    """A study from its file's contents (``path``: the file, for config paths relative to it and the records)."""
    unknown = set(spec) - _STUDY_KEYS
    if unknown or "out" not in spec:
        raise ValueError(f"study {path or ''}: keys {sorted(unknown)} unknown, or no 'out' "
                         f"(keys: {sorted(_STUDY_KEYS)})")
    out = Path(spec["out"])
    base = path.parent if path is not None else None
    runs: dict[Path, Run] = {}
    for block in spec.get("runs", [{}]):
        if set(block) - _BLOCK_KEYS:
            raise ValueError(f"study {path or ''}: a block's keys {sorted(set(block) - _BLOCK_KEYS)} unknown "
                             f"(keys: {sorted(_BLOCK_KEYS)})")
        merged = {**{k: v for k, v in spec.items() if k in _BLOCK_KEYS}, **block}
        if not merged.get("configs"):
            raise ValueError(f"study {path or ''}: a block names no configs")
        # The block's own overrides first and winning, then its epochs, then the study's.
        fixed = {key: _text(v) for key, v in block.get("set", {}).items()}
        if "epochs" in merged:
            fixed.setdefault("trainer.max_epochs", _text(merged["epochs"]))
        for key, value in spec.get("set", {}).items():
            fixed.setdefault(key, _text(value))
        grid = {key: [_text(v) for v in (values if isinstance(values, list) else [values])]
                for key, values in merged.get("grid", {}).items()}
        points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
        folder = out / merged["folder"] if "folder" in merged else out
        configs = [_config_path(c, base) for c in merged["configs"]]
        for seed in parse_seeds(merged.get("seeds", [0])):  # seed-major: a seed's runs land together
            for config in configs:
                for point in points:
                    run = Run(config, seed, point, fixed, folder)
                    if runs.setdefault(run.record, run).fixed != fixed:
                        raise ValueError(f"study {path or ''}: {run.record} is named twice with different overrides")
    return Study(path, out, list(runs.values()), spec.get("report", {}), spec.get("runs_at"))


def load_study(path: str | Path) -> Study:
    """The study a YAML file describes (see the module's docstring)."""
    path = Path(path)
    return parse_study(yaml.safe_load(path.read_text()), path)


def dry_run(study: Study) -> None:
    """One line per run on stdout: its fit command, ``# done: `` before it if its record exists."""
    done = sum(run.done for run in study.runs)
    print(f"{len(study.runs)} runs in {study.out}: {done} done, {len(study.runs) - done} to run", file=sys.stderr)
    for run in study.runs:
        print(("# done: " if run.done else "") + shlex.join(run.command()))
