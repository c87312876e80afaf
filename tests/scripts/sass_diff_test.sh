#!/usr/bin/env bash
# scripts/sass_diff.sh on cubins of a small .cu built here (no device needed): a kernel whose code
# changed, one added, the anonymous namespace's per-file hash ignored, a renaming -e that matches
# kernels which gained a template argument, and the exit statuses. Prints "sass_diff_test: ok".
# Usage: tests/scripts/sass_diff_test.sh NVCC
set -u
here=$(cd "$(dirname "$0")" && pwd)
diff_script=$here/../../scripts/sass_diff.sh
nvcc=${1:?usage: $0 NVCC}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/k.cu" <<'CU'
namespace {
#ifdef SECOND_ARG
template <int N, bool kUnused = false>
#else
template <int N>
#endif
__global__ void scale(float* x) { x[threadIdx.x] *= N; }
__global__ void add(float* x) { x[threadIdx.x] += VALUE; }
}  // namespace
void launch(float* x) {
  scale<2><<<1, 32>>>(x);
  scale<3><<<1, 32>>>(x);
  add<<<1, 32>>>(x);
#ifdef EXTRA
  scale<4><<<1, 32>>>(x);
#endif
}
CU
build() {  # name, then -D flags
  local name=$1
  shift
  "$nvcc" -O3 -std=c++17 --generate-code=arch=compute_90a,code=sm_90a -cubin "$@" -o "$tmp/$name.cubin" "$tmp/k.cu" ||
    { echo "sass_diff_test: nvcc failed"; exit 1; }
}
build a -DVALUE=1.0f
build b -DVALUE=2.0f -DEXTRA
build c -DVALUE=1.0f -DSECOND_ARG
fail() { echo "sass_diff_test: $1"; echo "$out"; exit 1; }
out=$(bash "$diff_script" "$tmp/a.cubin" "$tmp/b.cubin")
rc=$?
echo "$out" | grep -qx 'differs   _ZN[0-9]*(anonymous)3addEPf' || fail "add's changed code"
echo "$out" | grep -qx 'only in B _ZN[0-9]*(anonymous)5scaleILi4EEEvPf' || fail "the kernel B added"
echo "$out" | grep -qx '2 same, 1 differ, 0 only in A, 1 only in B' || fail "the counts"
[ $rc = 1 ] || fail "exit status $rc, want 1 (a kernel differs)"
out=$(bash "$diff_script" "$tmp/a.cubin" "$tmp/a.cubin")
[ $? = 0 ] && [ "$out" = '3 same, 0 differ, 0 only in A, 0 only in B' ] || fail "a cubin against itself"
out=$(bash "$diff_script" "$tmp/a.cubin" "$tmp/c.cubin")
[ $? = 1 ] && echo "$out" | grep -qx '1 same, 0 differ, 2 only in A, 2 only in B' || fail "a template argument added, no -e"
out=$(bash "$diff_script" -e 's/ELb0EEEvPf/EEEvPf/' "$tmp/a.cubin" "$tmp/c.cubin")
[ $? = 0 ] && [ "$out" = '3 same, 0 differ, 0 only in A, 0 only in B' ] || fail "the added argument renamed away"
bash "$diff_script" -e 'bad(' "$tmp/a.cubin" "$tmp/c.cubin" > /dev/null 2>&1; [ $? = 2 ] || fail "a bad -e: want exit status 2"
bash "$diff_script" "$tmp/a.cubin" "$tmp/k.cu" > /dev/null 2>&1; [ $? = 2 ] || fail "a file that is not a cubin: want exit status 2"
bash "$diff_script" "$tmp/a.cubin" > /dev/null 2>&1; [ $? = 2 ] || fail "one cubin: want exit status 2"
echo "sass_diff_test: ok"
