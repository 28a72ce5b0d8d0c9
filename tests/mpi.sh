#!/usr/bin/env bash
# Data-parallel training under mpirun (make MPI=1 test-mpi; docs/distributed.md): the collectives on 2 and 3 ranks,
# then a small copy-task model with dropout, 30 steps, on N = 2 and 3 ranks against one process of the default
# build with --accum N (--batch B/N), compared byte for byte with cmp on the final checkpoints (the checkpoint
# holds no rank count, so the files are comparable whole). Usage: tests/mpi.sh BUILD_DIR.
set -uo pipefail
build=${1:?usage: tests/mpi.sh BUILD_DIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI runs as root
export OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d /tmp/eng_mpi_test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
failures=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" -eq 0 ]; then echo "mpi test: ok   $1"; else echo "mpi test: FAIL $1"; failures=$((failures + 1)); fi
}
mpi() {  # mpi N ARGS...: build/mpi/train on N ranks, one thread each
  local n=$1; shift
  timeout 120 mpirun --oversubscribe -np "$n" "$build/mpi/train" "$@" --threads 1
}
model=(copy --layers 2 --heads 2 --d-model 32 --seq-len 16 --dropout 0.1 --steps 30 --eval-every 0 --eval-batches 1
       --checkpoint-every 15)

for n in 2 3; do
  timeout 60 mpirun --oversubscribe -np "$n" "$build/mpi/comm_check" >"$dir/comm$n.out" 2>&1
  check "collectives on $n ranks (exact sums in rank order, reduce-scatter, all-gather, broadcast)" $?
done

for n in 2 3; do
  "$build/train" "${model[@]}" --threads 1 --batch $((6 / n)) --accum "$n" --checkpoint "$dir/accum$n.ckpt" \
    >"$dir/accum$n.out" 2>&1
  mpi "$n" "${model[@]}" --batch 6 --checkpoint "$dir/exact$n.ckpt" >"$dir/exact$n.out" 2>&1
  cmp -s "$dir/exact$n.ckpt" "$dir/accum$n.ckpt"
  check "$n ranks, --reduce exact: final checkpoint == one process with --accum $n, byte for byte" $?
done
"$build/train" "${model[@]}" --threads 1 --batch 6 --checkpoint "$dir/whole.ckpt" >/dev/null 2>&1
! cmp -s "$dir/whole.ckpt" "$dir/accum2.ckpt"
check "the comparison can fail: one micro-batch of 6 trains other weights than 2 of 3" $?
grep -q "^final: step 30" "$dir/exact2.out" && [ "$(grep -c '^final:' "$dir/exact2.out")" -eq 1 ]
check "rank 0 alone prints the final line" $?
diff <(grep -o 'loss [0-9.]* | acc [0-9.]*%' "$dir/exact2.out") \
     <(grep -o 'loss [0-9.]* | acc [0-9.]*%' "$dir/accum2.out") >/dev/null
check "the progress line's loss and accuracy are global (== one process with --accum 2)" $?

mpi 2 "${model[@]}" --batch 5 >"$dir/odd.out" 2>&1
[ $? -ne 0 ] && grep -q "batch 5 does not split over 2 ranks" "$dir/odd.out" && ! grep -q "^step" "$dir/odd.out"
check "--batch not divisible by the ranks: refused before any step" $?

[ $failures -eq 0 ] || { echo "mpi test: $failures failed"; exit 1; }
echo "mpi test: all passed"
