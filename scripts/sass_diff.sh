#!/usr/bin/env bash
# The kernels of two cubins (nvcc -cubin) compared by their machine code: each kernel's .text
# section, byte for byte, matched by name. A whole-cubin cmp fails as soon as any symbol changes
# (a template argument added, the per-file hash of an anonymous namespace); this says which
# kernels' code changed, so that only those need measuring again. Names are matched after the
# anonymous namespace's hash is dropped and, on B's side, after each -e EXPR (a sed -E expression).
# Prints a line per kernel that differs or has no twin ("differs", "only in A", "only in B"),
# then the counts. Exit status 0 when every kernel of A has an identical twin in B (B may add
# kernels), 1 otherwise, 2 on a usage error. Needs readelf (binutils). Relocation entries (a
# kernel's references to other symbols) are not compared, only the code bytes.
# Usage: scripts/sass_diff.sh [-e SED-EXPR]... A.cubin B.cubin
#   nvcc -I include -I src -O3 -DNDEBUG -std=c++17 --generate-code=arch=compute_90a,code=sm_90a \
#     -cubin -o b.cubin src/sparse_mla/splitk_kernel.cu        # and a.cubin from the other tree
#   scripts/sass_diff.sh -e 's/(splitk_kernelI.*)Lb0EEEvN/\1EEvN/' a.cubin b.cubin  # B's split-K
#                                                 kernels gained a last bool template argument
set -uo pipefail
export LC_ALL=C
exprs=()
while [ $# -gt 0 ]; do
  case "$1" in
    -e) [ $# -ge 2 ] || { echo "$0: -e needs a sed expression" >&2; exit 2; }
        exprs+=(-e "$2"); shift 2 ;;
    *) break ;;
  esac
done
if [ $# -ne 2 ]; then
  echo "usage: $0 [-e SED-EXPR]... A.cubin B.cubin: which kernels' code differs" >&2
  exit 2
fi
command -v readelf > /dev/null || { echo "$0: readelf (binutils) is needed" >&2; exit 2; }
if [ ${#exprs[@]} -gt 0 ] && ! echo x | sed -E "${exprs[@]}" > /dev/null 2>&1; then
  echo "$0: a -e expression is not one sed -E takes: ${exprs[*]}" >&2
  exit 2
fi
for f in "$1" "$2"; do
  readelf -h "$f" > /dev/null 2>&1 || { echo "$0: $f is not an ELF file (a cubin)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "<hash of the section's bytes> <name>" for each kernel's .text section, names normalised.
kernels() {  # file, then sed arguments for its names
  local file=$1 name hash
  shift
  readelf -W -S "$file" 2> /dev/null | grep -o ' \.text\.[^ ]*' | while read -r name; do
    # The dump without its header line (it holds the name); readelf warns about CUDA's section info.
    hash=$(readelf -x "$name" "$file" 2> /dev/null | grep '^  0x' | sha256sum | cut -c1-16)
    echo "$hash ${name#.text.}"
  done | sed -E 's/_GLOBAL__N__[0-9a-f]{8}_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]{8}/(anonymous)/' | {
    if [ $# -gt 0 ]; then sed -E "$@"; else cat; fi; }
}
kernels "$1" | sort -k2 > "$tmp/a"
kernels "$2" "${exprs[@]}" | sort -k2 > "$tmp/b"
[ -s "$tmp/a" ] || { echo "$0: $1 holds no kernel code (.text sections)" >&2; exit 2; }
join -1 2 -2 2 -a 1 -a 2 -e - -o 0,1.1,2.1 "$tmp/a" "$tmp/b" | awk '
  $2 == $3 { same++; next }
  $3 == "-" { print "only in A " $1; only_a++; next }
  $2 == "-" { print "only in B " $1; only_b++; next }
  { print "differs   " $1; differ++ }
  END {
    printf "%d same, %d differ, %d only in A, %d only in B\n", same, differ, only_a, only_b
    exit (differ + only_a > 0)
  }'
