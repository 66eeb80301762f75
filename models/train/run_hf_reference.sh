#!/usr/bin/env bash
# HF transformers golden outputs for tests/cpu_backend/hf_reference_test.cc, on the GPU machine
# (the device tool's `run`, from the repository root):
#   bash models/train/run_hf_reference.sh     -> $OUT/tiny-v4.json
# then check the file in as tests/data/hf_reference/tiny-v4.json. See models/train/hf_reference.py.
set -euo pipefail
export PYTHONUNBUFFERED=1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
python3 models/train/hf_reference.py --model models/tiny-v4 --out "${OUT:?set OUT}/tiny-v4.json" "$@"
