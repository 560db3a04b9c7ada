#!/usr/bin/env bash
# Issue #14: the (p) runs after the switch fix (fresh Adam state for the centers, step decay counted
# from the joint phase), same protocol and seeds as results/long_lambda (20 epochs of pre-training,
# 60 in all, lambda = 1/300), so `experiments compare` pairs them with the runs made before the fix:
#   python -m lit_otclust.experiments compare --a results/study_switch:mnist_ot_p \
#       --b results/long_lambda:mnist_ot_p:clustering_weight=0.003333
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
RUN="python -m lit_otclust.experiments run --out results/study_switch --seeds 0 1 2 --jobs 1 --threads 1"
SET="trainer.max_epochs=60 phases.pretrain_epochs=20 data.data_dir=$DATA"
(   $RUN --configs mnist_ot_p --set $SET ) &
(   $RUN --configs mnist_soft_kmeans_p --set $SET ) &
wait
python -m lit_otclust.experiments table --out results/study_switch
# The paper's Algorithm read literally (issue #14): k-means on the untrained encoder before pre-training,
# centers kept through it (`phases.kmeans_at=start`), against the refit at the switch above.
(   $RUN --configs mnist_ot_p --grid phases.kmeans_at=start --set $SET ) &
(   $RUN --configs mnist_soft_kmeans_p --grid phases.kmeans_at=start --set $SET ) &
wait
python -m lit_otclust.experiments table --out results/study_switch
