#!/usr/bin/env bash
# Installs the Debian packages needlework builds with, if any are missing. Idempotent: a machine
# that has them all runs no apt command. Needs root or sudo only when something is missing.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git clang-format
      libzmq3-dev cppzmq-dev libsodium-dev libsqlite3-dev sqlite3 libyaml-cpp-dev libboost-dev  # Beast; Boost.Math: Clopper-Pearson
      nlohmann-json3-dev libcli11-dev googletest libgtest-dev libgmock-dev libpcre2-dev
      chromium   # chromium: tests/report/html_test renders the HTML report headless
      prometheus  # promtool check metrics: tests/dashboard parse /metrics with a real parser
      slurmctld slurmd slurm-client munge   # tests/slurm: a one-node Slurm (slurm-wlm's daemons)
      libssl-dev ca-certificates  # http/client.cc: https for the http backend (Boost.Asio SSL
                                  # over OpenSSL, verified against the system CA store)
      nodejs)  # tests/http/openai_node: the official OpenAI Node SDK against nw serve
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm comes with NodeSource's nodejs package; with Debian's it is a package of its own.
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
