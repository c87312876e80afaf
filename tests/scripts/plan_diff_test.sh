#!/usr/bin/env bash
# scripts/plan_diff.sh on fake dsa-bench builds: moved T values joined into ranges, only the
# fields that differ, groups kept apart, the grep pattern, and the exit status. Prints
# "plan_diff_test: ok" when all of it holds.
set -u
here=$(cd "$(dirname "$0")" && pwd)
diff_script=$here/../../scripts/plan_diff.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fake() {  # name, then "T splits" pairs of H 16 and of H 64 (after a "|"), then the hash
  local name=$1 hash=$2 heads=16
  shift 2
  { echo "cat <<'G'"
    for a in "$@"; do
      if [ "$a" = "|" ]; then heads=64; continue; fi
      echo "sms 132 H $heads topk 512 bf16 unknown planner T ${a% *}: kernel 0 keys 32 splits ${a#* } chunk 32 ctas 1"
    done
    echo "plan-grid: 2 plans, hash $hash"
    echo G; } > "$tmp/$name"
  chmod +x "$tmp/$name"
}
fake b0 aaaa "1 16" "2 16" "3 16" "4 16" "5 16" "|" "1 8" "2 8"
fake b1 bbbb "1 16" "2 8" "3 8" "4 16" "5 8" "|" "1 8" "2 4"
fake short cccc "1 16" "2 16"
out=$(bash "$diff_script" "$tmp/b0" "$tmp/b1")
rc=$?
fail() { echo "plan_diff_test: $1"; echo "$out"; exit 1; }
echo "$out" | grep -qx 'sms 132 H 16 topk 512 bf16 unknown planner: T 2-3, 5 (T 2: splits 16 -> 8)' || fail "H 16's line"
echo "$out" | grep -qx 'sms 132 H 64 topk 512 bf16 unknown planner: T 2 (T 2: splits 8 -> 4)' || fail "H 64's line"
echo "$out" | grep -qx '4 plans moved; hash aaaa -> bbbb' || fail "the count"
[ $rc = 1 ] || fail "exit status $rc, want 1 (plans moved)"
out=$(bash "$diff_script" "$tmp/b0" "$tmp/b1" 'H 64')
echo "$out" | grep -q 'H 16' && fail "the pattern kept H 16"
echo "$out" | grep -qx '1 plans moved; hash aaaa -> bbbb' || fail "the count with a pattern"
out=$(bash "$diff_script" "$tmp/b0" "$tmp/b0")
[ $? = 0 ] || fail "the same build twice: want exit status 0"
bash "$diff_script" "$tmp/b0" "$tmp/short" > /dev/null 2>&1; [ $? = 2 ] || fail "grids of other lengths: want exit status 2"
bash "$diff_script" "$tmp/b0" 2> /dev/null; [ $? = 2 ] || fail "one build: want exit status 2"
echo "plan_diff_test: ok"
