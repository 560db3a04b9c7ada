#!/usr/bin/env bash
# Issue #14's background work in order, for a working session to start and leave running (every step is
# resumable, so the next session starts it again and it goes on where it stopped):
#   nohup bash results/run_queue_cpu.sh > queue.log 2>&1 &
# 1. MNIST Table 1 at the full protocol (on 2026-11-25 only soft k-means (p) seed 4 is left) and Figure 2 at 200
#    epochs, 3 seeds a point (~12 h), side by side in three lanes: the protocol's last run, then Figure 2's
#    epsilon = 1 lane; the epsilon = 1e-3 and 1e-1 lanes from the start (so no lane idles while the protocol's
#    last run ends). The lanes' runs are disjoint, so no run is started twice.
# 2. Figure 2's table and figure (every run done: all skipped), then CIFAR-10, 5 columns x 3 seeds x 20 epochs
#    (~2.7 h).
set -euo pipefail
cd "$(dirname "$0")/.."
( bash results/run_protocol_cpu.sh && EPS=1 bash results/run_figure2_cpu.sh ) &
EPS=0.001 bash results/run_figure2_cpu.sh &
EPS=0.1 bash results/run_figure2_cpu.sh &
wait
bash results/run_figure2_cpu.sh
bash results/run_cifar10_protocol_cpu.sh
