#!/usr/bin/env bash
# scripts/ab_bench.sh on two fake dsa-bench builds: the join by case, the change, the ranges over
# moved and unmoved plans, a case one build failed, a hinted build's "/V<N>" names joined to the
# unhinted ones, and the exit status. Prints
# "ab_bench_test: ok" when all of it holds.
set -u
here=$(cd "$(dirname "$0")" && pwd)
ab=$here/../../scripts/ab_bench.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
row() {  # case, plan, median: a line of dsa-bench's table
  printf '%-18s %5d %4d %8d %7s %-7s %9s %9s %22s\n' "$1" 1 32 2048 "$2" ok 2.3e-03 1.9e-06 "$3 ($3-400.0)"
}
{ echo 'echo "device fake"'; echo "cat <<'T'"; row case-a 32/64,s 15.4; row case-b 32/32,s 13.7; row case-c rows 20.0
  row case-d rows 10.0; echo T; } > "$tmp/b0"
{ echo 'echo "device fake"'; echo "cat <<'T'"; row case-a 32/32,s 11.4; row case-c rows 20.4; row case-d rows 9.9; echo T
  echo 'echo "FAIL case-b: vs GPU reference"'; } > "$tmp/b1"
chmod +x "$tmp/b0" "$tmp/b1"
out=$(bash "$ab" "$tmp/b0" "$tmp/b1" --suite any)
rc=$?
fail() { echo "ab_bench_test: $1"; echo "$out"; exit 1; }
echo "$out" | grep -Eq '^case-a +32/64,s +32/32,s +15\.4 +15\.4 +11\.4 +11\.4 +-26\.0%$' || fail "case-a's line"
echo "$out" | grep -q '^not compared: case-b (FAIL in b1/1 b1/2)$' || fail "case-b's failure"
echo "$out" | grep -qx 'plan moved: 1 cases, -26.0 to -26.0 %' || fail "the moved cases' range"
echo "$out" | grep -qx 'same plan: 2 cases, -1.0 to +2.0 %' || fail "the same-plan cases' range"
[ $rc = 1 ] || fail "exit status $rc, want 1 (a case not compared)"
bash "$ab" "$tmp/b0" "$tmp/b0" > /dev/null || fail "the same build twice: exit status $?, want 0"
{ echo "cat <<'T'"; row case-a/V2048 32/64,s 14.0; row case-b/V2048 32/32,s 13.7; row case-c/V512 rows 20.0
  row case-d/V1 rows 10.0; echo T; } > "$tmp/hinted"
chmod +x "$tmp/hinted"
out=$(bash "$ab" "$tmp/b0" "$tmp/hinted") || fail "hinted against unhinted: exit status $?, want 0"
echo "$out" | grep -Eq '^case-a +32/64,s +32/64,s +15\.4 +15\.4 +14\.0 +14\.0 +-9\.1%$' || fail "the hinted case-a's line"
bash "$ab" "$tmp/b0" 2> /dev/null; [ $? = 2 ] || fail "one build: want exit status 2"
echo "ab_bench_test: ok"
