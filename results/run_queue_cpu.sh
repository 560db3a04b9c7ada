#!/usr/bin/env bash
# Issue #14's background work, for a working session to start and leave running (every step is resumable, so the
# next session starts it again and it goes on where it stopped):
#   WANDB_MODE=offline nohup bash results/run_queue_cpu.sh > queue.log 2>&1 &
# Complete, and so no longer queued (rerunning any of them skips every run): CIFAR-10's 20-epoch protocol
# (results/run_cifar10_protocol_cpu.sh), MNIST's lambda on CIFAR-10 (run_cifar10_lambda_cpu.sh), epsilon annealing
# at 200 epochs (run_anneal_cpu.sh), the bfloat16 study (run_bf16_cpu.sh).
# - MNIST Figure 2 at 200 epochs, 3 seeds a point (complete on 2026-11-26, fourth session: every run skips),
#   three lanes, one epsilon each (disjoint runs, so no run is started twice);
# - then in each lane one seed of CIFAR-10 at 100 epochs (results/run_cifar10_long_cpu.sh: OT and soft k-means, then
#   OT at lambda = 1/300; complete on 2026-11-26, seventh session: every run skips);
# - then in each lane that seed's other three CIFAR-10 columns at 100 epochs (results/run_cifar10_long_rest_cpu.sh:
#   OT (p), soft k-means (p), AE + k-means; ~4 h a lane, started 2026-11-26's seventh session).
# Three 1-thread lanes on the 2 cores, so that no core idles.
set -euo pipefail
cd "$(dirname "$0")/.."
( EPS=1 bash results/run_figure2_cpu.sh; SEEDS=0 bash results/run_cifar10_long_cpu.sh; SEEDS=0 bash results/run_cifar10_long_rest_cpu.sh ) &
( EPS=0.001 bash results/run_figure2_cpu.sh; SEEDS=1 bash results/run_cifar10_long_cpu.sh; SEEDS=1 bash results/run_cifar10_long_rest_cpu.sh ) &
( EPS=0.1 bash results/run_figure2_cpu.sh; SEEDS=2 bash results/run_cifar10_long_cpu.sh; SEEDS=2 bash results/run_cifar10_long_rest_cpu.sh ) &
wait
bash results/run_figure2_cpu.sh
bash results/run_cifar10_long_cpu.sh
bash results/run_cifar10_long_rest_cpu.sh
