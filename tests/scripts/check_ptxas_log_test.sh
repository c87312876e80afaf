#!/usr/bin/env bash
# scripts/check_ptxas_log.sh on ptxas's own messages for a small .cu built here (no device): a
# kernel that writes a local array at run-time indices fails the check, the same kernel with
# fixed indices passes; a spilling kernel's local memory and a C7520 line are judged from fake logs.
# Prints "check_ptxas_log_test: ok". Usage: tests/scripts/check_ptxas_log_test.sh NVCC
set -u
here=$(cd "$(dirname "$0")" && pwd)
check=$here/../../scripts/check_ptxas_log.sh
nvcc=${1:?usage: $0 NVCC}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/k.cu" <<'CU'
__global__ void pick(int* x, int k) {
  int a[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) a[SLOT] = x[i * 32 + threadIdx.x];
  x[threadIdx.x] = a[3];
}
CU
fail() { echo "check_ptxas_log_test: $1"; exit 1; }
build() {  # SLOT expression (where item i is written), log
  "$nvcc" -c -O3 -arch=sm_90a -Xptxas --warn-on-spills -Xptxas --warn-on-local-memory-usage -DSLOT="$1" \
    -o "$tmp/k.o" "$tmp/k.cu" > "$2" 2>&1 || fail "nvcc failed: $(cat "$2")"
}
build '(i * k) & 15' "$tmp/dynamic.log"
grep -q "Local memory used for function" "$tmp/dynamic.log" || fail "ptxas did not report the run-time index's local memory"
bash "$check" "$tmp/dynamic.log" 2> "$tmp/err"; [ $? = 1 ] || fail "a run-time index passed"
grep -q "_Z4pickPii" "$tmp/err" || fail "the kernel is not named: $(cat "$tmp/err")"
build 'i' "$tmp/fixed.log"
bash "$check" "$tmp/fixed.log" 2> "$tmp/err" || fail "a fixed index failed: $(cat "$tmp/err")"
{ echo "ptxas warning : Local memory used for function 'spiller', size of stack frame: 16 bytes"
  echo "ptxas warning : Registers are spilled to local memory in function 'spiller', 16 bytes spill stores, 16 bytes spill loads"
} > "$tmp/spill.log"
bash "$check" "$tmp/spill.log" 2> /dev/null || fail "a spilling kernel's local memory failed"
echo "ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are serialized" > "$tmp/wgmma.log"
bash "$check" "$tmp/wgmma.log" 2> /dev/null; [ $? = 1 ] || fail "a C7520 line passed"
bash "$check" "$tmp/missing.log" 2> /dev/null; [ $? = 2 ] || fail "a missing log: want exit status 2"
echo "check_ptxas_log_test: ok"
