"""Studies run and reported: the paper's Table 1 and Figures 1-2, and the studies of RESULTS.md.

    python -m lit_otclust.experiments run configs/studies/protocol.yaml [--jobs 2] [--threads 1] [--dry-run]
    python -m lit_otclust.experiments run configs/studies/paper_protocol.yaml --launcher slurm
    python -m lit_otclust.experiments report configs/studies/protocol.yaml     # or: report --out results/protocol
    python -m lit_otclust.experiments sync configs/studies/protocol.yaml       # upload its offline W&B runs
    python -m lit_otclust.experiments compare --a results/protocol:mnist_ot --b results/protocol:mnist_soft_kmeans
    python -m lit_otclust.experiments claims    # the paper's p-values recomputed from its Table 1, beside ours

``run`` fits every run of a study file (:mod:`lit_otclust.lab.studies`, run by :mod:`lit_otclust.lab.runner`) that has no record yet: ``--jobs`` at a time
(``--jobs`` per GPU where several are visible), each on ``--threads`` CPU threads; ``--dry-run`` prints each
run's command and starts nothing; ``--launcher slurm`` submits the runs left as one SLURM job array. Each fit logs
to W&B (offline without credentials; ``--no-wandb``: not at all) as one run of the group named by the study, its
job type the column (config and grid point), its seed and grid settings as tags; ``sync`` uploads a study's offline
runs, after which W&B's grouped view shows each column's mean and spread by epoch. Runs that pre-train alike (one
seed's (p) runs, whatever their loss) pre-train once, the others starting from its checkpoint at the switch
(``--no-share-pretraining``: each its own; :mod:`lit_otclust.pretrain_cache`). ``report``
renders the study's records into its folder: per folder of records a table beside the paper's numbers with Welch
t-tests (``table.md``), accuracy per epoch (``figure1_<data>.png``) and, with a grid key, accuracy against it
(``figure2_<data>.png`` and ``.md``); and what the study file's ``report:`` asks for (:func:`report`).
"""

from __future__ import annotations

import argparse
import os
import sys

# The statistics, the reports and the runner live in their own modules; the notebook reads every name from here.
from lit_otclust.lab.legacy import RetiredOption
from lit_otclust.lab.proportions import proportions_report  # noqa: F401
from lit_otclust.lab.reports import (confused, confusion_report, figures, grid_markdown, grid_points,  # noqa: F401
                                     grid_runs, proxy_check, report, report_folder)
from lit_otclust.lab.runner import run_local, run_named, submit_slurm, sync_wandb
from lit_otclust.lab.stats import (BASELINES, COMPARISONS, DKM_FORM, METHODS, NAMES, OTHER_METRICS, PAPER,  # noqa: F401
                                   PAPER_P, PAPER_RUNS, SETTINGS, claims, compare, compare_table, load, paired_power,
                                   paper_pvalues, select, table, table1)
from lit_otclust.lab.studies import CURVE_KEYS, Study, dry_run, load_study  # noqa: F401
from lit_otclust.runfiles import read_confusions, read_curves  # noqa: F401


def _epoch(value: str) -> int | str:
    """``--epoch``'s value: an epoch of the curves, or ``lowest``."""
    if value == "lowest":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"an epoch (an integer) or 'lowest', got {value!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lit_otclust.experiments", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="fit a study's runs that have no record yet")
    p.add_argument("study", help="a study file, e.g. configs/studies/protocol.yaml")
    p.add_argument("--jobs", type=int, default=None, help="runs at a time (a GPU each where several; SLURM: no limit)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads a run (OMP_NUM_THREADS)")
    p.add_argument("--launcher", choices=["local", "slurm"], default="local")
    p.add_argument("--dry-run", action="store_true", help="print each run's command; start nothing")
    p.add_argument("--run", default=None, metavar="NAME", help="only this run (a SLURM array task's)")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN",
                   help="only the runs whose name matches (shell pattern, repeatable; the first pattern's run first)")
    p.add_argument("--wandb", action=argparse.BooleanOptionalAction, default=True,
                   help="log each run to W&B, grouped by study (offline without credentials; default: on)")
    p.add_argument("--share-pretraining", action=argparse.BooleanOptionalAction, default=True,
                   help="runs that pre-train alike (one seed's (p) runs, whatever their loss) pre-train once: each "
                        "fit gets --pretrain_cache <out>/runs/pretrained (lit_otclust.pretrain_cache); the same "
                        "results, bit for bit on one machine")
    p.add_argument("--slurm-option", action="append", default=[], metavar="OPTION",
                   help="an #SBATCH option of the array, e.g. --slurm-option=--gpus-per-task=1 (repeatable)")
    p.add_argument("--sbatch", default="sbatch", help="the submit command")
    p = sub.add_parser("sync", help="upload a study's offline W&B runs (wandb sync)")
    p.add_argument("study", help="a study file")
    p.add_argument("--dry-run", action="store_true", help="print the wandb sync command; upload nothing")
    p = sub.add_parser("report", help="write a study's tables, figures and paired tests into its folder")
    p.add_argument("study", nargs="?", default=None, help="a study file")
    p.add_argument("--out", default=None, help="instead of a study: a folder of records")
    p.add_argument("--key", default="val/acc")
    p.add_argument("--baselines", default=BASELINES)
    p.add_argument("--grid_key", default=None)
    p.add_argument("--grid_default", type=float, default=None)
    # argparse formats help with %: the docstring's "95%" must be escaped
    p = sub.add_parser("compare", help=compare.__doc__.splitlines()[0].replace("%", "%%"))
    p.add_argument("--a", required=True, metavar="DIR:CONFIG[:key=value,...]")
    p.add_argument("--b", required=True, metavar="DIR:CONFIG[:key=value,...]")
    p.add_argument("--key", default="val/acc")
    p.add_argument("--epoch", type=_epoch, default=None, help="an epoch of the curves, or lowest (each run's lowest)")
    p.add_argument("--key_b", default=None)
    p.add_argument("--epoch_b", type=_epoch, default=None, help="b's epoch, if not --epoch")
    p.add_argument("--against", type=float, default=None, help="a claimed difference to test (e.g. the paper's)")
    p.add_argument("--seeds", default=None, help="only these seeds, e.g. 5-9 (the ones not used to choose a setting)")
    p = sub.add_parser("claims", help="the paper's p-values recomputed from its Table 1, beside ours paired by seed")
    p.add_argument("--mnist", default="results/protocol", help="MNIST's folder of records")
    p.add_argument("--cifar10", default="results/cifar10_long", help="CIFAR-10's folder of records")
    args = parser.parse_args(argv)
    if args.command == "compare":
        try:
            compare(args.a, args.b, args.key, args.epoch, args.key_b, args.against, seeds=args.seeds,
                    epoch_b=args.epoch_b)
        except ValueError as err:  # no such runs, no seed in common, a missing epoch: the message, not a traceback
            parser.error(str(err))
        return 0
    if args.command == "claims":
        print(claims({"mnist": args.mnist, "cifar10": args.cifar10}), end="")
        return 0
    if args.command == "report":
        if (args.study is None) == (args.out is None):
            parser.error("report takes a study file or --out FOLDER")
        try:
            written = (report(load_study(args.study)) if args.study else
                       report_folder(args.out, args.key, args.baselines or None, args.grid_key, args.grid_default))
        except ValueError as err:  # a study without records yet, a malformed file: the message, not a traceback
            parser.error(str(err))
        print("\n".join(map(str, written)))
        return 0
    study = load_study(args.study)
    if args.command == "sync":
        return sync_wandb(study, args.dry_run)
    if study.archived:  # its records stay reportable; only the commit it names runs it
        if not args.dry_run:
            parser.error(study.archived)
        print(f"# {study.archived}")
        return 0
    if args.only:
        try:
            study = study.only(args.only)
        except ValueError as err:  # a typo in a pattern: the message, not a traceback
            parser.error(str(err))
    try:
        if args.run is not None:
            return run_named(study, args.run, args.threads, args.wandb, args.share_pretraining)
        if args.dry_run:
            dry_run(study)
        if args.launcher == "slurm":
            submit_slurm(study, args.threads, args.jobs, args.slurm_option, args.sbatch, args.dry_run,
                         args.share_pretraining)
            return 0
        return 0 if args.dry_run else run_local(study, args.jobs or 1, args.threads, args.wandb,
                                                share_pretraining=args.share_pretraining)
    except RetiredOption as err:  # a run names an option since retired: where its result is, not a traceback
        parser.error(str(err))


def entry() -> None:
    """``python -m lit_otclust.experiments``: :func:`main`, exiting with its code."""
    try:
        sys.exit(main())
    except BrokenPipeError:  # the reader went away (`run --dry-run | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit would raise again
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a tool the closed pipe stopped


if __name__ == "__main__":
    entry()
