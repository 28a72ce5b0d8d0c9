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
