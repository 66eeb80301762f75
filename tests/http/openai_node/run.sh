#!/usr/bin/env bash
# The official OpenAI Node SDK against `nw serve` on models/tiny-v4 (ctest: http_openai_node).
# Usage: run.sh NW_BINARY SOURCE_DIR WORK_DIR
# Installs the SDK with `npm ci` from the committed package-lock.json into WORK_DIR (npm's cache
# makes later runs quick), starts `nw serve` on a free port with an API key file and an access
# log, runs test.mjs, and stops the server. Fails (never skips) when node, npm or the registry is
# missing: the SDK is what this test is about.
set -euo pipefail
nw=$(realpath "$1")
src=$(realpath "$2")
work=$3
here="$src/tests/http/openai_node"
mkdir -p "$work"
work=$(realpath "$work")
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "openai_node: '$tool' is not installed (scripts/setup.sh installs nodejs)" >&2; exit 1; }
done
cp "$here/package.json" "$here/package-lock.json" "$here/test.mjs" "$work/"
cd "$work"
if ! npm ci --no-audit --no-fund --loglevel=error; then
  echo "openai_node: npm ci failed: the npm registry must be reachable to install the SDK" >&2
  exit 1
fi

umask 077
key="nw-test-$RANDOM-$RANDOM-$RANDOM"
printf '%s\n' "$key" > api-key
rm -f serve.log access.log
"$nw" serve --model "$src/models/tiny-v4" --listen 127.0.0.1:0 --api-key-file api-key \
  --access-log access.log 2> serve.log &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/^nw serve: listening on \(http:\/\/[^,]*\),.*/\1/p' serve.log | head -n 1)
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { echo "openai_node: nw serve exited:" >&2; cat serve.log >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "openai_node: nw serve did not start within 60 s" >&2; cat serve.log >&2; exit 1; }
echo "openai_node: nw serve at $url"
node test.mjs "$url" tiny-v4 "$key"
# Every request was logged, without the key.
lines=$(wc -l < access.log)
[ "$lines" -ge 10 ] || { echo "openai_node: only $lines access log lines" >&2; exit 1; }
if grep -q "$key" access.log serve.log; then echo "openai_node: the API key was logged" >&2; exit 1; fi
echo "openai_node: $lines access log lines"
