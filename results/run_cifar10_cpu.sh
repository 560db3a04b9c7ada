#!/usr/bin/env bash
# CIFAR-10 as far as 2 cores allow: the conv autoencoder configs as they are (the paper's
# lambda = 1, epsilon = 1e-2), all 60k images, seed 0, 6 epochs (2-4 min an epoch here, sharing the cores).
# The paper's protocol: --seeds $(seq 0 49) --set trainer.max_epochs=200 on a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
python -m lit_otclust.experiments run --out results/cifar10 --seeds 0 --jobs ${JOBS:-2} --threads 1 \
    --configs cifar10_ae_kmeans cifar10_ot cifar10_soft_kmeans --set trainer.max_epochs=6 data.data_dir=$DATA
python -m lit_otclust.experiments table --out results/cifar10
python -m lit_otclust.experiments figures --out results/cifar10
