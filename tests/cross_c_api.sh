#!/usr/bin/env bash
# The C interface's test (tests/c_api_test.c) and the lean embed of a cross build, run under qemu-user on a
# checkpoint the host build trained: the C test's own checks pass and both give the same ids (the host's ids are
# printed beside them: other kernels may break a near tie otherwise, so they are not required to match).
# Usage: tests/cross_c_api.sh HOST_BUILD CROSS_BUILD "RUNNER"
#   e.g. tests/cross_c_api.sh build build-armhf "qemu-arm -L /usr/arm-linux-gnueabihf"
set -euo pipefail
host=${1:?usage: tests/cross_c_api.sh HOST_BUILD CROSS_BUILD RUNNER} cross=${2:?}
read -r -a runner <<<"${3:?}"
dir=$(mktemp -d /tmp/eng_cross_c_api.XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$host/train" copy --layers 1 --d-model 16 --heads 2 --seq-len 16 --steps 5 --eval-every 0 --threads 2 \
  --checkpoint "$dir/copy.st" >/dev/null
c_ids=$("${runner[@]}" "$cross/c_api_test" "$dir/copy.st" 5,3,7,2,1 10)
lean_ids=$("${runner[@]}" "$cross/embed-lean/embed" "$dir/copy.st" 5,3,7,2,1 10)
echo "$cross: C API $c_ids, lean embed $lean_ids (host embed $("$host/embed" "$dir/copy.st" 5,3,7,2,1 10))"
[ "$c_ids" = "$lean_ids" ] || { echo "$cross: the C API and the lean embed differ"; exit 1; }
