#!/usr/bin/env bash
# Data-parallel training under mpirun (make MPI=1 test-mpi; docs/distributed.md): the collectives on 2 and 3 ranks,
# then a small copy-task model with dropout, 30 steps, on N = 2 and 3 ranks against one process of the default
# build with --accum N (--batch B/N), compared byte for byte with cmp on the final checkpoints (the checkpoint
# holds no rank count, so the files are comparable whole), and on 2 and 3 ranks against one process with the same
# --batch (the same rows and dropout masks, keyed per global row: the losses equal to rounding). Usage: tests/mpi.sh
# BUILD_DIR.
set -uo pipefail
build=${1:?usage: tests/mpi.sh BUILD_DIR}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI runs as root
export OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d /tmp/eng_mpi_test.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
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

# Rows keyed per global row: N ranks at --batch 6 draw the rows and dropout masks of one process at --batch 6, so
# the loss curves agree to rounding (the sums are reordered) on rows that all count the same tokens.
fixed=(copy --fixed-length --layers 2 --heads 2 --d-model 32 --seq-len 16 --dropout 0.1 --steps 10 --eval-every 0
       --log-every 1 --batch 6)
close_curves() {  # close_curves A.csv B.csv: all 10 training losses within 1e-5 relative
  paste -d, <(grep ',train,' "$1" | cut -d, -f3) <(grep ',train,' "$2" | cut -d, -f3) |
    awk -F, 'NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++ } END { exit !(n == 10 && !bad) }'
}
"$build/train" "${fixed[@]}" --threads 1 --log "$dir/rows1.csv" >/dev/null 2>&1
for n in 2 3; do
  mpi "$n" "${fixed[@]}" --log "$dir/rows$n.csv" >/dev/null 2>&1 && close_curves "$dir/rows1.csv" "$dir/rows$n.csv"
  check "$n ranks at --batch 6 with dropout: the loss curve of one process at --batch 6 within 1e-5" $?
done
"$build/train" "${fixed[@]}" --threads 1 --seed 2 --log "$dir/rows_seed2.csv" >/dev/null 2>&1 &&
  ! close_curves "$dir/rows1.csv" "$dir/rows_seed2.csv"
check "the curve comparison can fail: another seed's curve is not within 1e-5" $?

mpi 2 "${model[@]}" --batch 5 >"$dir/odd.out" 2>&1
[ $? -ne 0 ] && grep -q "batch 5 does not split over 2 ranks" "$dir/odd.out" && ! grep -q "^step" "$dir/odd.out"
check "--batch not divisible by the ranks: refused before any step" $?

# --reduce fast: MPI's own sum per bucket, started during backward; weights within 1e-5 of exact per tensor. The
# key projection's bias is left out: softmax over the keys ignores the q.b it adds to every logit of a row, so its
# true gradient is zero and Adam turns the rounding noise of its computed gradient into full-size steps (1e-5 of
# its norm after 30 steps on 3 ranks, where every other tensor stays below 2e-7).
for n in 2 3; do
  mpi "$n" "${model[@]}" --batch 6 --reduce fast --checkpoint "$dir/fast$n.ckpt" >"$dir/fast$n.out" 2>&1 &&
    "$build/mpi/checkpoint_close" "$dir/fast$n.ckpt" "$dir/exact$n.ckpt" 1e-5 k_proj.bias >"$dir/close$n.out"
  rc=$?  # before the message's $(cat ...), which sets $? itself
  check "$n ranks, --reduce fast: weights within 1e-5 of exact per tensor ($(cat "$dir/close$n.out"))" $rc
done

# Checkpoints: written by rank 0 alone in the one-process format, so that a run goes on under another rank count.
mpi 3 "${model[@]}" --batch 6 --steps 15 --checkpoint "$dir/n3_15.ckpt" >/dev/null 2>&1
"$build/train" "${model[@]}" --threads 1 --batch 2 --accum 3 --steps 15 --checkpoint "$dir/a3_15.ckpt" >/dev/null 2>&1
cmp -s "$dir/n3_15.ckpt" "$dir/a3_15.ckpt"
check "a checkpoint written at step 15 by 3 ranks == one process's with --accum 3" $?
mpi 3 "${model[@]}" --batch 6 --resume "$dir/n3_15.ckpt" --checkpoint "$dir/n3_resumed.ckpt" >/dev/null 2>&1
cmp -s "$dir/n3_resumed.ckpt" "$dir/exact3.ckpt"
check "3 ranks resumed at step 15 with 3 ranks: == the uninterrupted 3-rank run" $?
mpi 2 "${model[@]}" --batch 6 --resume "$dir/n3_15.ckpt" --checkpoint "$dir/n2_from3.ckpt" >/dev/null 2>&1
"$build/train" "${model[@]}" --threads 1 --batch 3 --accum 2 --resume "$dir/n3_15.ckpt" --checkpoint "$dir/a2_from3.ckpt" \
  >/dev/null 2>&1
cmp -s "$dir/n2_from3.ckpt" "$dir/a2_from3.ckpt" && ! cmp -s "$dir/n2_from3.ckpt" "$dir/exact3.ckpt"
check "a 3-rank checkpoint resumed with 2 ranks == resumed by one process with --accum 2" $?
"$build/train" "${model[@]}" --threads 1 --batch 6 --steps 15 --checkpoint "$dir/one_15.ckpt" >/dev/null 2>&1
mpi 2 "${model[@]}" --batch 6 --resume "$dir/one_15.ckpt" --checkpoint "$dir/n2_from1.ckpt" >/dev/null 2>&1
"$build/train" "${model[@]}" --threads 1 --batch 3 --accum 2 --resume "$dir/one_15.ckpt" --checkpoint "$dir/a2_from1.ckpt" \
  >/dev/null 2>&1
cmp -s "$dir/n2_from1.ckpt" "$dir/a2_from1.ckpt"
check "a one-process checkpoint (no --accum) resumed with 2 ranks == resumed with --accum 2" $?

# ZeRO-1: each rank updates its slice with its share of the state; the weights and the gathered state are the
# unsharded run's, and a sharded checkpoint resumes under another rank count.
for n in 2 3; do
  mpi "$n" "${model[@]}" --batch 6 --shard-optimizer --checkpoint "$dir/shard$n.ckpt" >"$dir/shard$n.out" 2>&1
  cmp -s "$dir/shard$n.ckpt" "$dir/exact$n.ckpt"
  check "$n ranks, --shard-optimizer: final checkpoint (weights and gathered state) == unsharded, byte for byte" $?
done
mpi 2 "${model[@]}" --batch 6 --shard-optimizer --resume "$dir/n3_15.ckpt" --checkpoint "$dir/shard_from3.ckpt" \
  >/dev/null 2>&1
cmp -s "$dir/shard_from3.ckpt" "$dir/n2_from3.ckpt"
check "a 3-rank checkpoint resumed with 2 sharded ranks == resumed unsharded" $?

# Ranks that differ are refused at start, naming the difference (mpirun's MPMD form gives each rank its own line).
exe=$(realpath "$build/mpi/train")
timeout 60 mpirun --oversubscribe -np 1 "$exe" "${model[@]}" --threads 1 --batch 6 --lr 0.001 : \
  -np 1 "$exe" "${model[@]}" --threads 1 --batch 6 --lr 0.002 >"$dir/flags.out" 2>&1
[ $? -ne 0 ] && grep -q "rank 1 was started with other flags than rank 0: argument [0-9]* is '0.002' where rank 0 has \
'0.001'" "$dir/flags.out" && ! grep -q "^step" "$dir/flags.out"
check "ranks started with different flags: refused, naming the argument" $?
mkdir -p "$dir/host_a" "$dir/host_b"
printf 'the same words on every host. %.0s' {1..300} >"$dir/host_a/corpus.txt"
printf 'other words on the second host. %.0s' {1..300} >"$dir/host_b/corpus.txt"
text=(text --data corpus.txt --layers 1 --heads 2 --d-model 16 --seq-len 8 --batch 2 --steps 2 --threads 1)
timeout 60 mpirun --oversubscribe -np 1 -wdir "$dir/host_a" "$exe" "${text[@]}" : \
  -np 1 -wdir "$dir/host_b" "$exe" "${text[@]}" >"$dir/data.out" 2>&1
[ $? -ne 0 ] && grep -q -- "--data corpus.txt differs between rank 1 (.*) and rank 0" "$dir/data.out"
check "ranks whose data files differ: refused, naming the flag" $?

# A non-finite loss: the checks read the summed loss and gradients, the same on every rank, so every rank that
# reports it names the same step, and the job ends instead of leaving a rank waiting.
mpi 2 "${model[@]}" --batch 6 --optimizer sgd --lr 1e30 --clip 0 >"$dir/nan.out" 2>&1
[ $? -ne 0 ] && grep -q "error: train: step [0-9]*: .*nan" "$dir/nan.out" &&
  [ "$(grep -o 'error: train: step [0-9]*' "$dir/nan.out" | sort -u | wc -l)" -eq 1 ]
check "a NaN stops the job, every rank at the same step" $?

# A rank killed with SIGKILL ends the job within seconds (mpirun stops the others and says which rank died); the
# last checkpoint is whole, and resuming from it reaches the weights of an uninterrupted run.
long=("${model[@]}" --batch 6 --steps 150 --checkpoint-every 3 --log-every 1000)
mpi 2 "${long[@]}" --checkpoint "$dir/uninterrupted.ckpt" >/dev/null 2>&1
mpirun --oversubscribe -np 2 "$build/mpi/train" "${long[@]}" --threads 1 --checkpoint "$dir/killed.ckpt" \
  >"$dir/killed.out" 2>&1 &
launcher=$!
for _ in $(seq 200); do [ -f "$dir/killed.ckpt" ] && break; sleep 0.05; done
victim=$(pgrep -P "$launcher" | head -1)
kill -9 "$victim"
killed_at=$SECONDS
wait "$launcher"
status=$?
[ $status -ne 0 ] && [ $((SECONDS - killed_at)) -le 10 ] && grep -qi "signal 9\|killed" "$dir/killed.out"
check "SIGKILL of one rank: mpirun exits ($status) within 10 s with a message" $?
mpi 2 "${long[@]}" --resume "$dir/killed.ckpt" --checkpoint "$dir/killed.ckpt" >"$dir/resumed.out" 2>&1 &&
  cmp -s "$dir/killed.ckpt" "$dir/uninterrupted.ckpt"
check "the killed job resumes from its last checkpoint to the uninterrupted run's weights" $?

[ $failures -eq 0 ] || { echo "mpi test: $failures failed"; exit 1; }
echo "mpi test: all passed"
