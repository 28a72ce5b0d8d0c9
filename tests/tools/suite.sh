# The doctest suite's own output, as `make test` shows it (sourced by tests/tools.sh: check, $build, $runner): a
# test that cannot run here says "skipped: ..." in one line, and figures that explain a check stay out of the way
# unless it fails; no MESSAGE block, which reads like a failure report.
cases='cuda*,mnist: the real*,vec kernels: the table*,reversible: activation memory*'
out=$("${runner[@]}" "$build/run_tests" -tc="$cases" 2>&1); rc=$?
[ $rc -eq 0 ] && ! grep -q "MESSAGE" <<<"$out"; check "the suite prints no MESSAGE blocks" $?
case "$build" in
  *cuda*) ;;
  *)
    grep -qx "skipped: CUDA tests: eng was built without CUDA (rebuild with make CUDA=1)" <<<"$out"
    check "a skipped test says so in one line" $?
    ;;
esac
