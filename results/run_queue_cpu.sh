#!/usr/bin/env bash
# Issue #14's background work in order, for a working session to start and leave running (every step is
# resumable, so the next session starts it again and it goes on where it stopped):
#   nohup bash results/run_queue_cpu.sh > queue.log 2>&1 &
# 1. MNIST Table 1 at the full protocol (the (p) columns are what is left on 2026-11-25);
# 2. Figure 2 at 200 epochs, 3 seeds a point (~12 h);
# 3. CIFAR-10, 5 columns x 3 seeds x 20 epochs (~2.7 h).
set -euo pipefail
cd "$(dirname "$0")/.."
bash results/run_protocol_cpu.sh
bash results/run_figure2_cpu.sh
bash results/run_cifar10_protocol_cpu.sh
