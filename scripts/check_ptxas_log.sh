#!/usr/bin/env bash
# Fails a build whose log shows ptxas doing something slow that it reports but does not fail on:
# - wgmma instructions it serialised (info C7520: each waits for the previous one; a silent
#   10 %+ loss in a wgmma kernel, perf.md run 292);
# - local memory in a kernel that spills nothing: an array the compiler indexes at run time, as
#   split-K's CompactScan had at b904b17 (13 kernels, perf.md run 634). Spills are reported on
#   their own (--warn-on-spills), so a kernel that spills may also use local memory.
# Needs the build's -Xptxas --warn-on-local-memory-usage (CMakeLists.txt).
# Usage: scripts/check_ptxas_log.sh BUILD_LOG. Exit 0 clean, 1 with the offending lines, 2 usage.
set -uo pipefail
log=${1:?usage: $0 BUILD_LOG}
[ -r "$log" ] || { echo "$0: cannot read $log" >&2; exit 2; }
status=0
if grep -q "C7520" "$log"; then
  grep "C7520" "$log" >&2
  echo "error: ptxas serialised wgmma instructions (C7520); see the lines above" >&2
  status=1
fi
# Names of functions with local memory, less those that spill.
lmem=$(sed -nE "s/.*Local memory used for function '([^']+)'.*/\1/p" "$log" | sort -u)
spills=$(sed -nE "s/.*Registers are spilled to local memory in function '([^']+)'.*/\1/p" "$log" | sort -u)
unspilled=$(comm -23 <(echo "$lmem") <(echo "$spills") | sed '/^$/d')
if [ -n "$unspilled" ]; then
  echo "$unspilled" | sed 's/^/  /' >&2
  echo "error: ptxas put these kernels in local memory without spilling (an array indexed at run time?)" >&2
  status=1
fi
exit $status
