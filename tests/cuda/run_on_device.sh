#!/usr/bin/env bash
# Every GPU test and check in one call on the H200 (the device tool), stage by stage, each with a
# timeout, logs to $OUT. Stages (STAGES, default all but perf): kernels engine memcheck hf
# campaigns perf racecheck.
#   kernels    tests/cuda: every kernel against the CPU reference, one process per suite
#   engine     tests/cuda_engine: cuda / cuda-paged / cuda-pd against cpu on 216 NIAH prompts
#   memcheck   compute-sanitizer memcheck on an end-to-end generate (256 tokens) and the kernels
#   hf         HF transformers' DeepseekV4ForCausalLM on tiny-v4 (models/train/hf_reference.py)
#   campaigns  nw run of the model-card campaigns with backend cuda (experiments/model-card/)
#   perf       cuda_backend_ops_test --perf at V4-Flash shapes
#   racecheck  compute-sanitizer racecheck over the shared-memory kernels
#
# Here (no GPU needed), from the repository root:
#   cmake -S . -B build -G Ninja -DNW_CUDA=ON && ninja -C build -j2 nw cuda_backend_ops_test \
#     cuda_engine_test
#   ../shared/tools/device-pack build/cli/nw build/tests/cuda/cuda_backend_ops_test \
#     build/tests/cuda_engine_test
# Then the device tool's run with carry [".device"], timeout_s 600 and the command
#   bash tests/cuda/run_on_device.sh            (or STAGES="engine hf" bash tests/cuda/...)
set -u
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/nw-cuda-out}
STAGES=${STAGES:-kernels engine memcheck hf campaigns}
mkdir -p "$OUT"
K=.device/bin/cuda_backend_ops_test
E=.device/bin/cuda_engine_test
NW=.device/bin/nw
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
has() { [[ " $STAGES " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$OUT/gpu.txt"
nproc | sed 's/^/cpu cores: /'

if has kernels; then
  failed=""
  for suite in $($K --gtest_list_tests | grep -v '^ ' | tr -d '.'); do
    timeout 150 "$K" --gtest_filter="${suite}.*" >>"$OUT/kernels.log" 2>&1 || failed="$failed $suite"
  done
  grep -E '^\[  (PASSED|FAILED|SKIPPED)|Failure' "$OUT/kernels.log" | head -40
  echo "kernel suites failed:${failed:- none}"
fi

if has engine; then
  SECONDS=0
  NW_CUDA_ENGINE_REPORT=$OUT/engine.txt timeout 420 "$E" >"$OUT/engine.log" 2>&1
  echo "engine tests exit $? in ${SECONDS}s"
  grep -E '^\[  (PASSED|FAILED|SKIPPED)|^\[       OK|Failure|Expected|Which is|actual' "$OUT/engine.log" | head -60
  cat "$OUT/engine.txt" 2>/dev/null | head -60
fi

if has memcheck; then
  NW_CUDA_ENGINE_PROMPTS=1 CUDA_LAUNCH_BLOCKING=1 timeout 240 "$SAN" --tool memcheck \
    --error-exitcode 2 "$E" --gtest_filter='CudaEngine.ServesThroughTheEngineFacade' \
    >"$OUT/memcheck.log" 2>&1
  echo "memcheck (engine, 256-token generate) exit $?"
  tail -3 "$OUT/memcheck.log"
  CUDA_LAUNCH_BLOCKING=1 timeout 150 "$SAN" --tool memcheck --error-exitcode 2 "$K" \
    --gtest_filter='CudaLinear.*:CudaTopK.SmallAndTileEdges:CudaAttention.*:CudaIndexer.*' \
    >>"$OUT/memcheck.log" 2>&1
  echo "memcheck (kernels) exit $?"
fi

if has hf; then
  if [ -f models/train/hf_reference.py ]; then
    PYTHONUNBUFFERED=1 timeout 240 python3 models/train/hf_reference.py --model models/tiny-v4 \
      --out "$OUT/tiny-v4.json" >"$OUT/hf.log" 2>&1
    echo "hf reference exit $?"
    tail -15 "$OUT/hf.log"
  else
    echo "hf: models/train/hf_reference.py missing"
  fi
fi

if has campaigns; then
  db=/tmp/nw-card.db
  for c in ${CAMPAIGNS:-experiments/model-card/gpu-dense.yaml experiments/model-card/gpu-topk.yaml experiments/model-card/gpu-index-precision.yaml}; do
    [ -f "$c" ] || { echo "campaign $c missing"; continue; }
    SECONDS=0
    timeout 200 "$NW" --db "$db" run "$c" >>"$OUT/campaigns.log" 2>&1
    echo "nw run $c exit $? in ${SECONDS}s"
  done
  for c in $(sqlite3 "$db" 'SELECT name FROM campaigns' 2>/dev/null); do
    "$NW" --db "$db" report "$c" --format markdown >>"$OUT/campaigns.md" 2>&1
  done
  tail -40 "$OUT/campaigns.log"
  cp "$db" "$OUT/card.db" 2>/dev/null
fi

if has perf; then
  timeout 150 "$K" --perf 2>&1 | tee "$OUT/perf.log"
fi

if has racecheck; then
  timeout 90 "$SAN" --tool racecheck --error-exitcode 2 "$K" \
    --gtest_filter='CudaTopK.SmallAndTileEdges:CudaIndexer.Bf16TensorCores:CudaAttention.TensorCoresBf16Kv:CudaArgmax.*:CudaRmsNorm.*' \
    >"$OUT/racecheck.log" 2>&1
  echo "racecheck exit $?"
  tail -4 "$OUT/racecheck.log"
fi
