#!/usr/bin/env bash
# Every GPU test and check in one call on the H200 (the device tool), stage by stage, each with a
# timeout, logs to $OUT. Stages (STAGES, default all but perf): kernels engine memcheck hf
# campaigns perf racecheck.
#   kernels    tests/cuda: every kernel against the CPU reference, one process per suite
#   engine     tests/cuda_engine: cuda / cuda-paged / cuda-pd against cpu on 216 NIAH prompts
#   memcheck   compute-sanitizer memcheck on an end-to-end generate (256 tokens) and the kernels
#   hf         HF transformers' DeepseekV4ForCausalLM on tiny-v4 (models/train/hf_reference.py)
#   campaigns  nw run of the model-card campaigns with backend cuda (experiments/model-card/)
#   serve      nw serve --backend cuda and --backend cpu: the same greedy completion
#   daemon     nw coordinator + nw worker --gpu 0 + a CPU worker on a cpu-vs-cuda campaign
#   perf       cuda_backend_ops_test --perf at V4-Flash shapes
#   racecheck  compute-sanitizer racecheck over the shared-memory kernels
#
# Here (no GPU needed), from the repository root:
#   cmake -S . -B build -G Ninja -DNW_CUDA=ON && ninja -C build -j2 nw cuda_backend_ops_test \
#     cuda_engine_test
#   scripts/device-pack.sh build/cli/nw build/tests/cuda/cuda_backend_ops_test \
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
# sqlite3 through Python (the GPU image may lack the sqlite3 shell): sql DB QUERY
sql() { python3 -c 'import sqlite3,sys; [print(*r, sep="|") for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2])]' "$1" "$2" 2>&1; }
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
  NW_CUDA_ENGINE_REPORT=$OUT/engine.txt timeout ${ENGINE_TIMEOUT:-420} "$E" --gtest_filter="${ENGINE_FILTER:-*}" \
    >"$OUT/engine.log" 2>&1
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
    timeout ${CAMPAIGN_TIMEOUT:-200} "$NW" --db "$db" run "$c" >>"$OUT/campaigns.log" 2>&1
    echo "nw run $c exit $? in ${SECONDS}s"
  done
  for c in $(sql "$db" 'SELECT name FROM campaigns'); do
    "$NW" --db "$db" report "$c" --format markdown >>"$OUT/campaigns.md" 2>&1
  done
  tail -40 "$OUT/campaigns.log"
  cp "$db" "$OUT/card.db" 2>/dev/null
fi

if has daemon; then
  # The distributed path: a coordinator daemon, one GPU worker and one CPU worker, a campaign that
  # has cpu and cuda jobs (each must go to the right worker), then its report.
  ddb=/tmp/nw-daemon.db
  "$NW" coordinator --listen tcp://127.0.0.1:5599 --db "$ddb" >"$OUT/daemon.log" 2>&1 &
  cpid=$!
  sleep 1
  "$NW" worker --coordinator tcp://127.0.0.1:5599 --gpu 0 --id gpu0 >>"$OUT/daemon.log" 2>&1 &
  gpid=$!
  "$NW" worker --coordinator tcp://127.0.0.1:5599 --cpu --slots 12 --id cpu >>"$OUT/daemon.log" 2>&1 &
  wpid=$!
  "$NW" submit experiments/gpu/quickstart-cpu-vs-cuda.yaml --coordinator tcp://127.0.0.1:5599 \
    >>"$OUT/daemon.log" 2>&1
  SECONDS=0
  while [ $SECONDS -lt ${DAEMON_TIMEOUT:-200} ]; do
    left=$(sql "$ddb" "SELECT COUNT(*) FROM jobs WHERE state IN ('queued','leased')")
    [ "$left" = "0" ] && break
    sleep 3
  done
  echo "daemon campaign finished in ${SECONDS}s (jobs left: $left)"
  "$NW" status --coordinator tcp://127.0.0.1:5599 2>&1 | tail -8
  kill $gpid $wpid; sleep 1; kill $cpid; wait 2>/dev/null
  "$NW" --db "$ddb" report quickstart-cpu-vs-cuda --format markdown >"$OUT/daemon.md" 2>&1
  sql "$ddb" "SELECT j.backend, r.device, COUNT(*) FROM results r JOIN jobs j ON j.key = r.job_key GROUP BY 1, 2"
  head -30 "$OUT/daemon.md"
fi

if has serve; then
  # nw serve on the GPU backend: the same greedy completion as on the CPU backend.
  for b in cuda cpu; do
    "$NW" serve --model models/tiny-v4 --backend $b --listen 127.0.0.1:8077 >"$OUT/serve-$b.log" 2>&1 &
    spid=$!
    for i in $(seq 1 60); do
      python3 - <<'PY' 2>/dev/null && break
import urllib.request; urllib.request.urlopen("http://127.0.0.1:8077/v1/models", timeout=1)
PY
      sleep 0.5
    done
    python3 - "$b" <<'PY' | tee -a "$OUT/serve.txt"
import json, sys, urllib.request
body = json.dumps({"model": "tiny-v4", "prompt": "The special magic number for apple is", "max_tokens": 12, "temperature": 0}).encode()
req = urllib.request.Request("http://127.0.0.1:8077/v1/completions", data=body, headers={"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=60))
print(sys.argv[1], json.dumps(r["choices"][0]["text"]), r.get("usage"))
PY
    kill $spid; wait $spid 2>/dev/null
  done
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
