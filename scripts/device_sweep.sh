#!/usr/bin/env bash
# Plan-override sweeps for tuning (one device call). Usage: scripts/device_sweep.sh
set -uo pipefail
B=./build/tools/dsa-bench
run() { echo "== $*"; $B --reps 20 "$@" 2>/dev/null | grep -E "^custom"; }
for bk in 16 32; do
  run -T 1 --pattern random --block-keys $bk
  run -T 8 --pattern runs --valid 1 2048 33 700 5 1500 64 337 --block-keys $bk
  run -T 64 --pattern random --block-keys $bk
  run -T 1024 --pattern random --block-keys $bk
  run -T 4096 --pattern shared_prefix --prefix-len 8192 --block-keys $bk
done
