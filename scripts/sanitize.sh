#!/usr/bin/env bash
# Builds and runs the tests under a sanitizer (docs/sanitizers.md), CPU only:
#   scripts/sanitize.sh tsan [extra ctest args]   ThreadSanitizer over the tests labelled
#                                                 `threaded` (build-tsan/)
#   scripts/sanitize.sh asan [extra ctest args]   AddressSanitizer + UndefinedBehaviorSanitizer
#                                                 over the whole suite (build-asan/); e.g.
#                                                 `-L unit` for the unit tests only
# Exits non-zero when the build fails or any test fails (a sanitizer finding fails its test).
# Uses ccache when it is installed. NW_JOBS sets the build's and ctest's parallelism (default:
# the number of processors).
set -euo pipefail
cd "$(dirname "$0")/.."

kind="${1:-}"
case "$kind" in
  tsan | asan) shift ;;
  *)
    echo "usage: scripts/sanitize.sh tsan|asan [extra ctest args]" >&2
    exit 2
    ;;
esac

jobs="${NW_JOBS:-$(nproc)}"
configure=(--preset "$kind")
if command -v ccache >/dev/null 2>&1; then
  configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

start=$(date +%s)
cmake "${configure[@]}"
cmake --build --preset "$kind" --parallel "$jobs"
built=$(date +%s)
status=0
ctest --preset "$kind" --parallel "$jobs" "$@" || status=$?
done_at=$(date +%s)
echo "sanitize.sh $kind: build $((built - start)) s, tests $((done_at - built)) s, exit $status"
exit "$status"
