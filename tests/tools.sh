#!/usr/bin/env bash
# Tests of the programs as a user runs them: each file in tests/tools/ (train.sh: build/train's guards, a run
# killed with SIGKILL that resumes to bit-identical weights, ...) is sourced in turn, with the helpers below.
# Usage: tests/tools.sh BUILD_DIR (make test runs it after the doctest suite).
set -uo pipefail
build=${1:?usage: tests/tools.sh BUILD_DIR}
# Under AddressSanitizer an impossible allocation aborts unless the allocator may return null, as libc's does.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
read -r -a runner <<<"${ENG_RUN:-}"  # e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu" for a cross build
train() { "${runner[@]}" "$build/train" "$@"; }
embed() { "${runner[@]}" "$build/embed" "$@"; }
bench() { "${runner[@]}" "$build/bench" "$@"; }
inspect() { "${runner[@]}" "$build/inspect" "$@"; }
quantize() { "${runner[@]}" "$build/quantize" "$@"; }
tokenizer() { "${runner[@]}" "$build/tokenizer" "$@"; }
convert() { "${runner[@]}" "$build/convert" "$@"; }
generate() { "${runner[@]}" "$build/generate" "$@"; }
dir=$(mktemp -d /tmp/eng_tools_test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
failures=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" -eq 0 ]; then echo "tools test: ok   $1"; else echo "tools test: FAIL $1"; failures=$((failures + 1)); fi
}

for part in "$(dirname "$0")"/tools/*.sh; do
  # shellcheck source=/dev/null
  source "$part"
done

[ $failures -eq 0 ] || { echo "tools test: $failures failed"; exit 1; }
echo "tools test: all passed"
