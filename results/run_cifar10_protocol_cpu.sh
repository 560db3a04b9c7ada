#!/usr/bin/env bash
# Issue #14: CIFAR-10 Table 1, the five trained columns x 3 seeds, as many epochs as this machine allows: EPOCHS
# (default 20) from scratch; the (p) columns pre-train EPOCHS/4 first (the paper's 50 before 200), as a tenth of the
# paper's 200 (+50). The configs as they are (conv autoencoder, lambda = 1, epsilon 1e-2, all 60k images).
# Measured 2026-11-25: ~29 s an epoch on the 2 idle cores (benchmarks/results/bench_fit_cifar10_1ep_evalbatch.txt),
# so the 15 runs (~330 epochs at EPOCHS=20) would take ~2.7 h of that machine; on the slower machine of the fourth
# session the three lanes ran ~1.15 epochs a minute together (52 min a run), ~5 h for the 15 runs. Three lanes of one run each, disjoint
# configs; resumable (rerunning skips finished runs and resumes interrupted ones).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
EPOCHS=${EPOCHS:-20}
PRE=$((EPOCHS / 4))
OUT=results/cifar10_protocol
RUN="python -m lit_otclust.experiments run --out $OUT --jobs 1 --threads 1 --seeds 0 1 2"
SET="data.data_dir=$DATA trainer.max_epochs=$EPOCHS"
SETP="data.data_dir=$DATA trainer.max_epochs=$((EPOCHS + PRE)) phases.pretrain_epochs=$PRE"
# Lanes of about the same length: OT + AE + k-means seeds 0-1, soft k-means + its (p), OT (p) + AE + k-means seed 2.
(   $RUN --configs cifar10_ot --set $SET
    $RUN --configs cifar10_ae_kmeans --seeds 0 1 --set $SET ) &
(   $RUN --configs cifar10_soft_kmeans --set $SET
    $RUN --configs cifar10_soft_kmeans_p --set $SETP ) &
(   $RUN --configs cifar10_ot_p --set $SETP
    $RUN --configs cifar10_ae_kmeans --seeds 2 --set $SET ) &
wait
python -m lit_otclust.experiments table --out $OUT
python -m lit_otclust.experiments figures --out $OUT
