#!/usr/bin/env bash
# The plans of two dsa-bench builds over plan-grid's grid, compared (no device needed: plan-grid
# describes an H100, an H200 and smaller parts). One line per group of the grid (SMs, heads, topk,
# format, hint, choice) whose plans differ: the T values that moved, as ranges, then the first
# moved T's plan fields that differ between the builds. Exit status 1 when any plan moved, 0
# when none did, 2 on a usage error or grids that differ.
# Usage: scripts/plan_diff.sh B0 B1 [GREP-PATTERN]   (e.g. 'planner' for the planner's own plans)
#   scripts/plan_diff.sh build-main/tools/dsa-bench build/tools/dsa-bench 'sms 132 .* unknown planner'
set -uo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 B0 B1 [GREP-PATTERN]: the plans two dsa-bench builds make, compared" >&2
  exit 2
fi
b0=$1 b1=$2 pattern=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in 0 1; do
  bin=$b0
  [ $i = 1 ] && bin=$b1
  "$bin" plan-grid > "$tmp/$i" || { echo "$0: $bin plan-grid failed" >&2; exit 2; }
done
# Lines: "sms 132 H 16 topk 2048 bf16 unknown planner T 4: <plan>", then the count and hash.
awk -v pattern="$pattern" '
  # "kernel 0 keys 32 splits 2 ..." against another: the fields that differ, "splits 2 -> 1"; an
  # error or a plan of other fields whole.
  function changes(a, b,    x, y, n, m, i, out) {
    n = split(a, x, " "); m = split(b, y, " ")
    if (n != m || n % 2 || x[1] == "error" || y[1] == "error") return a " -> " b
    for (i = 1; i < n; i += 2) {
      if (x[i] != y[i]) return a " -> " b
      if (x[i + 1] != y[i + 1]) out = out (out == "" ? "" : ", ") x[i] " " x[i + 1] " -> " y[i + 1]
    }
    return out
  }
  function flush() {
    if (group != "" && ranges != "") printf "%s: T %s (T %s: %s)\n", group, ranges, first_t, changes(first0, first1)
    ranges = ""; run_lo = run_hi = -1
  }
  function close_run() {
    if (run_lo < 0) return
    ranges = ranges (ranges == "" ? "" : ", ") (run_lo == run_hi ? run_lo : run_lo "-" run_hi)
    run_lo = -1
  }
  NR == FNR { plan0[FNR] = $0; next }
  {
    line0 = plan0[FNR]
    if ($1 == "plan-grid:") { hash1 = $NF; split(line0, h, " "); hash0 = h[length(h)]; next }
    if ($10 != "T") { print "plan_diff: unexpected line " FNR ": " $0 > "/dev/stderr"; bad = 1; exit 2 }
    key = $1; for (i = 2; i <= 9; ++i) key = key " " $i
    t = $11; sub(/:$/, "", t)
    split(line0, f0, " ")
    key0 = f0[1]; for (i = 2; i <= 9; ++i) key0 = key0 " " f0[i]
    if (key0 != key || f0[11] != $11) { print "plan_diff: the two grids differ at line " FNR > "/dev/stderr"; bad = 1; exit 2 }
    if (key != group) { close_run(); flush(); group = key }
    p1 = $0; sub(/^[^:]*: /, "", p1)
    p0 = line0; sub(/^[^:]*: /, "", p0)
    if (p0 == p1 || (pattern != "" && key !~ pattern)) { close_run(); next }
    ++moved
    if (ranges == "" && run_lo < 0) { first_t = t; first0 = p0; first1 = p1 }
    if (run_lo >= 0 && t == run_hi + 1) run_hi = t
    else { close_run(); run_lo = run_hi = t }
  }
  END {
    if (bad) exit 2
    close_run(); flush()
    if (FNR != NR - FNR) { print "plan_diff: the grids differ in length" > "/dev/stderr"; exit 2 }
    printf "%d plans moved; hash %s -> %s\n", moved, hash0, hash1
    exit moved > 0
  }' "$tmp/0" "$tmp/1"
