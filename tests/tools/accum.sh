# build/train with micro-batches in one process (sourced by tests/tools.sh): --accum's keyed streams survive a
# checkpoint, --shard-optimizer over one rank is the plain optimizer (docs/distributed.md; the rank counts themselves
# are tested under mpirun by make MPI=1 test-mpi).
micro=(copy --layers 1 --d-model 16 --heads 2 --seq-len 8 --dropout 0.1 --batch 3 --accum 2 --eval-every 0
       --threads 1)
train "${micro[@]}" --steps 6 --checkpoint "$dir/accum_whole.ckpt" >/dev/null 2>&1 &&
  train "${micro[@]}" --steps 3 --checkpoint "$dir/accum_part.ckpt" >/dev/null 2>&1 &&
  train "${micro[@]}" --steps 6 --resume "$dir/accum_part.ckpt" --checkpoint "$dir/accum_part.ckpt" >/dev/null 2>&1 &&
  cmp -s "$dir/accum_whole.ckpt" "$dir/accum_part.ckpt"
check "train --accum 2 with dropout: resumed at step 3 == uninterrupted, byte for byte" $?
train "${micro[@]}" --steps 6 --shard-optimizer --checkpoint "$dir/accum_shard.ckpt" >/dev/null 2>&1 &&
  cmp -s "$dir/accum_whole.ckpt" "$dir/accum_shard.ckpt"
check "train --shard-optimizer in one process == the plain optimizer, byte for byte" $?
out=$(train "${micro[@]}" --steps 1 --reduce sum 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "train: --reduce must be exact or fast, got 'sum'" <<<"$out"; check "a bad --reduce value" $?
# Row g of a step draws its data and dropout masks keyed by g (docs/distributed.md): --batch 6, --batch 3 --accum 2
# and --batch 2 --accum 3 train on the same rows with the same masks, so their losses agree to rounding (the sums
# are reordered) on a task whose rows all count the same tokens. Then the same with per-batch randomness (reformer's
# rotations, the step's for every micro-batch) in a reversible stack (its backward recomputes the masks).
rows=(copy --fixed-length --layers 1 --d-model 16 --heads 2 --seq-len 8 --dropout 0.1 --eval-every 0 --threads 1
      --steps 3 --log-every 1)
for split in "6 1" "3 2" "2 3"; do
  read -r b a <<<"$split"
  train "${rows[@]}" --batch "$b" --accum "$a" --log "$dir/rows$a.csv" >/dev/null 2>&1 || echo "train --accum $a failed"
done
close_losses() {  # close_losses A.csv B.csv: every training row's loss within 1e-6 relative
  paste -d, <(grep ',train,' "$1" | cut -d, -f3) <(grep ',train,' "$2" | cut -d, -f3) |
    awk -F, 'NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) bad++ } END { exit !(n == 3 && !bad) }'
}
close_losses "$dir/rows1.csv" "$dir/rows2.csv" && close_losses "$dir/rows1.csv" "$dir/rows3.csv"
check "train with dropout: --batch 6, --batch 3 --accum 2 and --batch 2 --accum 3 give the same losses (1e-6)" $?
for split in "6 1" "3 2" "2 3"; do
  read -r b a <<<"$split"
  train "${rows[@]}" --attention reformer --reversible --batch "$b" --accum "$a" --log "$dir/lsh$a.csv" \
    >/dev/null 2>&1 || echo "train --attention reformer --accum $a failed"
done
close_losses "$dir/lsh1.csv" "$dir/lsh2.csv" && close_losses "$dir/lsh1.csv" "$dir/lsh3.csv"
check "the same with reformer's rotations in a reversible stack" $?
train "${rows[@]}" --batch 6 --dropout 0.2 --log "$dir/rows_other.csv" >/dev/null 2>&1 &&
  ! close_losses "$dir/rows1.csv" "$dir/rows_other.csv"
check "the loss comparison can fail: other dropout masks give other losses" $?
out=$(train text --data README.md --layers 1 --d-model 16 --heads 2 --seq-len 8 --mem-len 8 --batch 2 --accum 2 \
      --steps 1 --threads 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "train: --mem-len reads consecutive streams, one memory for the whole batch, and does not \
split over ranks or micro-batches" <<<"$out" && ! grep -q "^step" <<<"$out"
check "--mem-len with --accum 2: refused before any step" $?
