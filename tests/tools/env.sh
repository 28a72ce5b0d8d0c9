# The engine's environment variables as a user sets them (sourced by tests/tools.sh: train, check and $build come
# from there): a value that is not a whole number in range, or a kernel level this CPU cannot run, stops the
# program at its start with "error: VARIABLE ..." and exit status 1, never a silent default.
tiny=(copy --layers 1 --d-model 16 --heads 2 --seq-len 8 --steps 1 --eval-every 0)

for value in 4x 0 1025 ""; do
  out=$(ENG_THREADS=$value train "${tiny[@]}" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qxF "error: ENG_THREADS expects an integer in 1..1024, got '$value'" <<<"$out"
  check "ENG_THREADS='$value' is refused" $?
done
out=$(ENG_THREADS=3 train "${tiny[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q ", 3 threads$" <<<"$out"; check "ENG_THREADS=3 runs 3 threads" $?

# A level of the other architecture: the CPU the tests run on lacks it.
case "$build" in
  *aarch64*) lacking=avx2 offers="scalar, neon" ;;
  *) lacking=neon offers="scalar" ;;
esac
out=$(ENG_CPU=$lacking train "${tiny[@]}" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "^error: ENG_CPU: this CPU cannot run $lacking; it offers $offers" <<<"$out"
check "ENG_CPU=$lacking is refused, naming the levels this CPU offers" $?
out=$(ENG_CPU=sse train "${tiny[@]}" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "^error: ENG_CPU: unknown level 'sse'; this CPU offers $offers" <<<"$out"
check "an unknown ENG_CPU level is refused" $?
out=$(ENG_CPU=scalar train "${tiny[@]}" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^final: step 1" <<<"$out"; check "ENG_CPU=scalar runs" $?
