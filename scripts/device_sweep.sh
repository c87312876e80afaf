#!/usr/bin/env bash
# Plan-override sweeps for tuning (one device call). Usage: scripts/device_sweep.sh
set -uo pipefail
B=./build/tools/dsa-bench
run() { echo "== $*"; $B --reps 20 "$@" 2>/dev/null | tail -1; }
for s in 16 32 64; do run -T 1 --pattern random --splits $s; done
for s in 2 4 8; do run -T 64 --pattern random --splits $s; done
for bk in 32 64; do run -T 1024 --pattern random --block-keys $bk; done
for bk in 32 64; do run -T 4096 --pattern shared_prefix --prefix-len 8192 --block-keys $bk; done
