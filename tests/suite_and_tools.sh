#!/usr/bin/env bash
# `make test`: the doctest suite and tests/tools.sh side by side. Both are mostly one thread, and the tools' tests
# spend much of their time waiting on the processes they start, so on 2 cores this takes about the time of the
# longer one. The suite prints as it goes; the tools' output follows it. Fails when either fails.
# Usage: tests/suite_and_tools.sh BUILD_DIR "RUNNER" [doctest arguments...]
set -uo pipefail
build=${1:?usage: tests/suite_and_tools.sh BUILD_DIR RUNNER [ARGS...]}
runner=${2-}
shift 2
log="$build/tools_test.log"
ENG_RUN="$runner" bash "$(dirname "$0")/tools.sh" "$build" >"$log" 2>&1 &
tools=$!
echo "tests/tools.sh $build: running beside the suite, its output follows the suite's (also in $log)"
read -r -a run <<<"$runner"
"${run[@]}" "./$build/run_tests" "$@"
suite=$?
wait "$tools"
tools_rc=$?
cat "$log"
[ "$suite" -eq 0 ] && [ "$tools_rc" -eq 0 ]
