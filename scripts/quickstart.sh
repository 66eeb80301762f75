#!/usr/bin/env bash
# Sets up (Debian packages), builds, and runs the quickstart campaign end to end on the CPU with
# the shipped model, printing the boundary report.
#   scripts/quickstart.sh [extra `nw run` args, e.g. --workers 4]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build --parallel "$(nproc)" --target nw
exec build/cli/nw run experiments/quickstart.yaml "$@"
