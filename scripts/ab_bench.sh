#!/usr/bin/env bash
# A/B two dsa-bench builds in one device call: the same arguments through B0, B1, B0, B1 (two
# rounds, alternating, so that drift shows as a spread between rounds), then one line per case
# that both verified: each build's plan, its two medians (us) and B1's change against B0 (the
# means of the rounds); then the range of the change over the cases whose plan moved and over
# those whose plan stayed (their spread is the runs' noise). Cases either build failed or skipped
# are listed after the table. A case's "/V<N>" suffix (the --min-valid hint) is dropped before
# matching, so B1 may be a wrapper that passes the hint where B0 does not (hinted against unhinted).
# Usage (GPU machine): scripts/ab_bench.sh B0 B1 [dsa-bench args]
#   scripts/ab_bench.sh b0/dsa-bench b1/dsa-bench --suite sweep --kernel-only --kv fp8
#   scripts/ab_bench.sh b0/dsa-bench b1/dsa-bench --shape H16-T8-k2048-random,H128-T1-k2048-runs --kernel-only
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 B0 B1 [dsa-bench args]: the same dsa-bench arguments through two builds" >&2
  exit 2
fi
b0=$1 b1=$2
shift 2
for bin in "$b0" "$b1"; do
  [ -x "$bin" ] || { echo "$0: $bin is not an executable" >&2; exit 2; }
done
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for round in 1 2; do
  for build in 0 1; do
    bin=$b0
    [ $build = 1 ] && bin=$b1
    # Table rows: $1 case, $5 plan, $6 verify, $9 the kernel's median (dsa-bench's print_table).
    "$bin" "$@" 2>/dev/null | awk -v b=$build -v r=$round '$6 == "ok" || $6 == "ok+cpu" { print b, r, $1, $5, $9 }
                                                         /^FAIL / { sub(/:$/, "", $2); print b, r, $2, "FAIL", 0 }' >> "$rows"
  done
done
awk '
  { key = $3; sub(/\/V[0-9]+$/, "", key); if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    if ($4 == "FAIL") { failed[key] = failed[key] " b" $1 "/" $2; next }
    plan[key, $1] = $4; t[key, $1, $2] = $5; count[key, $1]++ }
  END {
    printf "%-28s %-22s %-22s %17s %17s %8s\n", "case", "plan b0", "plan b1", "b0 us (2 rounds)", "b1 us (2 rounds)", "b1/b0"
    for (i = 1; i <= n; ++i) {
      k = order[i]
      if (count[k, 0] == 2 && count[k, 1] == 2 && !(k in failed)) {
        m0 = (t[k, 0, 1] + t[k, 0, 2]) / 2; m1 = (t[k, 1, 1] + t[k, 1, 2]) / 2
        change = (m1 / m0 - 1) * 100
        printf "%-28s %-22s %-22s %8.1f %8.1f %8.1f %8.1f %+7.1f%%\n", k, plan[k, 0], plan[k, 1], t[k, 0, 1], t[k, 0, 2],
               t[k, 1, 1], t[k, 1, 2], change
        g = plan[k, 0] == plan[k, 1] ? "same" : "moved"
        if (!(g in cases) || change < lo[g]) lo[g] = change
        if (!(g in cases) || change > hi[g]) hi[g] = change
        cases[g]++
      } else {
        missing[++m] = k " (" (k in failed ? "FAIL in" failed[k] : "verified by b0 " count[k, 0] "x, b1 " count[k, 1] "x") ")"
      }
    }
    # The cases whose plan stayed show the noise of the runs beside the change of the moved ones.
    for (g in cases)
      printf "%s: %d cases, %+.1f to %+.1f %%\n", g == "same" ? "same plan" : "plan moved", cases[g], lo[g], hi[g]
    for (i = 1; i <= m; ++i) print "not compared: " missing[i]
    if (n == 0) { print "no case ran: check the arguments with one build alone"; exit 1 }
    exit (m > 0)
  }' "$rows"
