#!/usr/bin/env bash
# device-pack: stage built executables and the shared libraries they need for a GPU machine that
# has CUDA but not this machine's other libraries.
#
#   scripts/device-pack.sh build/cli/nw build/tests/cuda_engine_test ...
#
# Copies each named file into .device/bin/ and every shared library it links that the GPU
# machine's image may lack (anything outside glibc, libstdc++, libgcc and the CUDA toolkit) into
# .device/lib/, and ignores .device/ in git. On the GPU machine, start the command with
#   export LD_LIBRARY_PATH=$PWD/.device/lib:$LD_LIBRARY_PATH
# CUDA, cuBLAS and NCCL come from that machine's own toolkit.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: scripts/device-pack.sh FILE..." >&2
  exit 2
fi
top=$(git rev-parse --show-toplevel)
out=$top/.device
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >>"$exclude"
mkdir -p "$out/bin" "$out/lib"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libresolv\.so|libnsl\.so|libutil\.so|libanl\.so|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcublas|libcublasLt|libnccl|libnvidia|libcurand|libcusparse|libcufft|libnvrtc|libnvJitLink)'
for f in "$@"; do
  [ -f "$f" ] || { echo "device-pack: no file $f" >&2; exit 2; }
  cp -f "$f" "$out/bin/"
  ldd "$f" 2>/dev/null | awk '/=> \//{print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    [[ $path == /usr/local/cuda* ]] && continue
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done
done
