# build/embed, the embedding example (sourced by tests/tools.sh: embed, train, check and $dir come from there).
# A small copy-task checkpoint of its own (vocabulary 12: 10 symbols + 2; max_len 16).
train copy --layers 1 --d-model 16 --heads 2 --seq-len 16 --steps 5 --eval-every 0 --threads 2 \
  --checkpoint "$dir/embed.st" >/dev/null 2>&1; check "embed: a checkpoint to generate from" $?
# The embedding example continues a prompt from the trained checkpoint.
out=$(embed "$dir/embed.st" 5,3,7,2,1 4 2>&1); rc=$?
[ $rc -eq 0 ] && awk -F, '{ ok = NF == 4; for (i = 1; i <= NF; ++i) ok = ok && $i ~ /^[0-9]+$/ && $i < 12 }
                           END { exit !(ok && NR == 1) }' <<<"$out"
check "embed generates 4 in-vocabulary tokens ($out)" $?
# The longest continuation: the last prompt token gives the first new one, so 2 + 15 - 1 = 16 positions.
out=$(embed "$dir/embed.st" 5,3 15 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(tr ',' '\n' <<<"$out" | grep -c .)" -eq 15 ]; check "embed fills max_len exactly" $?

# refused_by_embed ARGS... -- TEXT: exit status 1 and TEXT in the message.
refused_by_embed() {
  local args=() out rc
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  out=$(embed "${args[@]}" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$2" <<<"$out" || { echo "  embed ${args[*]}: exit $rc: $out"; return 1; }
}
refused_by_embed "$dir/embed.st" 5,x -- "error: embed: PROMPT entry 2 expects an integer in 0..11, got 'x'"
check "embed refuses a bad prompt" $?
refused_by_embed "$dir/embed.st" 5,12 -- "error: embed: PROMPT entry 2 expects an integer in 0..11, got '12'"
check "embed refuses a token outside the vocabulary" $?
refused_by_embed "$dir/embed.st" 5,3 abc -- "error: embed: TOKENS expects an integer >= 1, got 'abc'"
check "embed refuses TOKENS that is not a number" $?
refused_by_embed "$dir/embed.st" 5,3 0 -- "error: embed: TOKENS expects an integer >= 1, got '0'"
check "embed refuses TOKENS 0" $?
refused_by_embed "$dir/embed.st" 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1 1 -- \
  "error: embed: PROMPT has 17 tokens, more than the model's max_len of 16"
check "embed refuses a prompt longer than max_len" $?
refused_by_embed "$dir/embed.st" 5,3 16 -- \
  "error: embed: TOKENS 16 after a prompt of 2 would run past the model's max_len of 16: at most 15 can be generated"
check "embed refuses to generate past max_len" $?
refused_by_embed "$dir/embed.st" -- "error: embed: expected CHECKPOINT and PROMPT (usage: embed [flags] CHECKPOINT"
check "embed without a prompt" $?
# The checkpoint's header renamed in place (same length, so the data offsets hold; the CRC covers the data only).
LC_ALL=C sed 's/"config\.encoder_layers"/"xonfig.encoder_layers"/' "$dir/embed.st" >"$dir/no_encoder.st"
refused_by_embed "$dir/no_encoder.st" 5,3 -- \
  "error: embed: $dir/no_encoder.st: config: the required key 'encoder_layers' is missing"
check "embed names a missing config key and the file" $?
LC_ALL=C sed 's/"config\./"xonfig./g' "$dir/embed.st" >"$dir/no_config.st"
refused_by_embed "$dir/no_config.st" 5,3 -- \
  "error: embed: $dir/no_config.st has no config.* metadata: not a checkpoint written by train"
check "embed refuses a file without a model config" $?
# Mapped (the default) or read, Generator or LanguageModel::step, the full checkpoint or its inference-only copy
# (inspect --strip): the same tokens.
want=$(embed "$dir/embed.st" 5,3,7,2,1 10 2>&1)
inspect --strip "$dir/embed.infer.st" "$dir/embed.st" >/dev/null 2>&1; check "embed: inspect --strip writes a copy" $?
same=0
for args in "--read" "--tensor-step" "--read --tensor-step"; do
  # shellcheck disable=SC2086
  [ "$(embed $args "$dir/embed.st" 5,3,7,2,1 10 2>&1)" = "$want" ] || { echo "  embed $args differs"; same=1; }
done
[ "$(embed "$dir/embed.infer.st" 5,3,7,2,1 10 2>&1)" = "$want" ] || same=1
check "embed: the same tokens mapped or read, by Generator or LanguageModel::step, from the stripped copy" $same
out=$(embed --stats "$dir/embed.st" 5,3,7,2,1 10 2>&1 >/dev/null)
grep -q "^embed: mapped .* Generator$" <<<"$out" && grep -q "^embed: first token after .* ms CPU), peak RSS" <<<"$out" &&
  grep -Eq "^embed: per token after the first \(9\): [0-9]+ us \([0-9]+ us CPU\), 0.0 heap allocations, 0.0 allocator blocks$" <<<"$out"
check "embed --stats: no allocation per token ($out)" $?
