#!/usr/bin/env bash
# Issue #14, ninth round: does the recipe study's most consistent candidate hold at the paper's length? On the
# 40-epoch proxy (results/study_recipe/, 5 seeds) epsilon annealed geometrically from 1 to 1e-2 over the first 20
# epochs beat the plain recipe on all 5 seeds, +0.012 ± 0.011 (p = 0.065). The same setting, 200 epochs, seeds 0-2,
# paired by seed with results/protocol/ (the same command without the annealing):
#   python -m lit_otclust.experiments compare --a results/study_anneal:mnist_ot:epsilon_start=1.0 \
#       --b results/protocol:mnist_ot [--epoch 39]
# One lane (results/run_queue_cpu.sh runs it in CIFAR-10's lane, after the loss-weight runs); resumable like the others
# (rerunning skips finished runs and resumes interrupted ones). ~45 min a run with four 1-thread runs on the 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
OUT=results/study_anneal
python -m lit_otclust.experiments run --out $OUT --jobs 1 --threads 1 --seeds ${SEEDS:-0 1 2} --configs mnist_ot \
    --grid model.epsilon_start=1.0 --set model.anneal_epochs=20 trainer.max_epochs=200 data.data_dir=$DATA
python -m lit_otclust.experiments table --out $OUT
