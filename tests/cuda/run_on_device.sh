#!/usr/bin/env bash
# One call on the H200 (the device tool): every test suite in its own process, perf mode, then the
# kernel tests under compute-sanitizer memcheck and a racecheck subset. Logs go to $OUT.
#
# Here (no GPU needed), from the repository root:
#   cmake -S . -B build-cuda -G Ninja -DNW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a
#   ninja -C build-cuda -j2 cuda_backend_ops_test
#   ../shared/tools/device-pack build-cuda/tests/cuda/cuda_backend_ops_test
# Then the device tool's run with carry [".device"], timeout_s 480 and the command
#   bash tests/cuda/run_on_device.sh
# Budget: tests ~1-2 min, perf ~1 min, memcheck <= 200 s, racecheck <= 90 s (timeouts enforce it).
set -u
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
B=.device/bin/cuda_backend_ops_test
OUT=${OUT:-/tmp/nw-cuda-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  | tee "$OUT/gpu.txt"

# 1. Tests: one process per suite, so that a fault in one kernel cannot hide the others.
failed=""
for suite in $($B --gtest_list_tests | grep -v '^ ' | tr -d '.'); do
  if ! timeout 150 "$B" --gtest_filter="${suite}.*" >>"$OUT/tests.log" 2>&1; then
    failed="$failed $suite"
  fi
done
grep -E '^\[  (PASSED|FAILED|SKIPPED)|Failure|max \|err\|' "$OUT/tests.log" | head -80
echo "test suites failed:${failed:- none}"

# 2. Perf at the V4-Flash shapes (copy and GEMM ceilings measured in the same run).
timeout 150 "$B" --perf 2>&1 | tee "$OUT/perf.log"

# 3. compute-sanitizer: memcheck over the kernel tests (the million-entry cases excluded), then
#    racecheck (shared-memory hazards) over the kernels with block-wide shared-memory phases.
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
CUDA_LAUNCH_BLOCKING=1 timeout 200 "$SAN" --tool memcheck --error-exitcode 2 "$B" \
  --gtest_filter='-*Large*:*CacheBoundary*' >"$OUT/memcheck.log" 2>&1
echo "memcheck exit $?"
tail -4 "$OUT/memcheck.log"
timeout 90 "$SAN" --tool racecheck --error-exitcode 2 "$B" \
  --gtest_filter='CudaTopK.SmallAndTileEdges:CudaIndexer.Bf16TensorCores:CudaAttention.TensorCoresBf16Kv:CudaArgmax.*:CudaRmsNorm.*' \
  >"$OUT/racecheck.log" 2>&1
echo "racecheck exit $?"
tail -4 "$OUT/racecheck.log"
