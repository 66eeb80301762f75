#!/usr/bin/env bash
# Fails when ptxas reports that it serialized a kernel's wgmma instructions or injected waits
# between them (infos C7510-C7519: "Potential Performance Loss: wgmma.mma_async instructions are
# serialized ..."). ptxas prints these as infos, not warnings, so -Werror does not catch them; a
# kernel that trips one still computes the right results and silently loses most of its speed
# (session 15's dims-split attention ran 1.03 ms instead of 0.96 ms). Run by ctest in -DNW_CUDA=ON
# builds (test wgmma_pipelines_not_serialized).
#   scripts/check_wgmma_pipelines.sh [nvcc] [source root]
set -euo pipefail
NVCC=${1:-nvcc}
ROOT=${2:-$(cd "$(dirname "$0")/.." && pwd)}
status=0
for src in "$ROOT"/kernels/cuda/*.cu; do
  grep -q 'kernels/cuda/hopper.cuh' "$src" || continue  # the files that issue wgmma
  log=$("$NVCC" -std=c++20 -gencode=arch=compute_90a,code=sm_90a -O3 -I"$ROOT" \
    --expt-relaxed-constexpr -Xptxas -v -x cu -c "$src" -o /dev/null 2>&1) || {
    echo "$log"
    echo "FAIL: $src does not compile"
    status=1
    continue
  }
  if grep -E "C75[0-9][0-9]|Potential Performance Loss" <<<"$log"; then
    echo "FAIL: ptxas serialized wgmma in $src (above)"
    status=1
  else
    echo "ok: $(basename "$src")"
  fi
done
exit $status
