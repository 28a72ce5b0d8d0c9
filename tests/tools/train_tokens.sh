# build/train text --tokenizer and --init (sourced by tests/tools.sh: train, inspect, check and $dir come from
# there): a language model on BPE tokens reports bits per byte beside bits per token, records its tokenizer in the
# checkpoint, and a second run starts from its weights; mismatches are refused by name.

tok=tests/data/tokenizer/trained_gpt2.json
out=$(train text --data README.md --tokenizer "$tok" --layers 1 --d-model 16 --heads 2 --seq-len 32 --batch 4 \
      --steps 6 --eval-every 6 --eval-batches 1 --threads 2 --attention causal-linear \
      --checkpoint "$dir/tokens.ckpt" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "eval @ 6: loss [0-9.]+ \([0-9.]+ bits/token, [0-9.]+ bits/byte\)" <<<"$out" &&
  grep -Eq "^test: [0-9.]+ bits/byte, [0-9.]+ bits/token over [0-9]+ tokens = [0-9]+ bytes \([0-9]+ windows\)$" <<<"$out"
check "train text --tokenizer: bits per token and per byte on validation and test" $?
out=$(inspect "$dir/tokens.ckpt" 2>&1)
grep -q "task.tokenizer" <<<"$out" && grep -Eq "config.vocab.*800" <<<"$out"
check "train text --tokenizer: the checkpoint records the tokenizer and its vocabulary" $?
out=$(train text --data README.md --tokenizer tests/data/tokenizer/trained_sp.json --layers 1 --d-model 16 --heads 2 \
      --seq-len 32 --batch 4 --steps 2 --eval-every 0 --threads 2 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "^test: [0-9.]+ bits/byte" <<<"$out"; check "train text --tokenizer with SentencePiece-style BPE" $?

out=$(train text --data README.md --tokenizer "$tok" --layers 1 --d-model 16 --heads 2 --seq-len 32 --batch 4 \
      --steps 2 --eval-every 0 --threads 2 --attention causal-linear --seed 5 --init "$dir/tokens.ckpt" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qF "model weights from $dir/tokens.ckpt" <<<"$out"
check "train --init: a new run from a checkpoint's weights (another seed)" $?
out=$(train text --data README.md --tokenizer "$tok" --layers 1 --d-model 32 --heads 2 --seq-len 32 --steps 1 \
      --threads 2 --attention causal-linear --init "$dir/tokens.ckpt" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "error: train: --init $dir/tokens.ckpt: the checkpoint's d_ff is '64', this run's '128'" <<<"$out"
check "train --init: another model is refused, naming the key" $?
out=$(train text --data README.md --layers 1 --d-model 16 --heads 2 --seq-len 32 --steps 1 --threads 2 \
      --attention causal-linear --init "$dir/tokens.ckpt" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "the checkpoint was trained on the tokens of a tokenizer; give that tokenizer with --tokenizer" <<<"$out"
check "train --init: a token model without --tokenizer is refused" $?
out=$(train text --data README.md --steps 1 --init "$dir/tokens.ckpt" --resume "$dir/tokens.ckpt" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "train: --init starts a new run from a checkpoint's weights, --resume continues one" <<<"$out"
check "train: --init and --resume together are refused" $?
out=$(train copy --tokenizer "$tok" --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "train: --tokenizer is for the text task, not 'copy'" <<<"$out"; check "train copy --tokenizer is refused" $?
