#!/usr/bin/env bash
# Sets up (Debian packages), builds with warnings as errors, and runs the whole test suite.
#   scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/format.sh  # clang-format (Google, 100 columns) must be clean
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNW_WERROR=ON
cmake --build build --parallel "$(nproc)"
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 900 "$@"
