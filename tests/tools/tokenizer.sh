# build/tokenizer (sourced by tests/tools.sh: tokenizer, check and $dir come from there): train, encode, decode,
# convert and info as a user runs them, on the committed corpus of tests/data/tokenizer/; bad input refused by name.

gzip -dc tests/data/tokenizer/corpus.txt.gz | head -c 200000 >"$dir/tok_train.txt"
out=$(tokenizer train --vocab 800 "$dir/tok_train.txt" -o "$dir/tok.json" 2>&1); rc=$?
[ $rc -eq 0 ] && cmp -s "$dir/tok.json" tests/data/tokenizer/trained_gpt2.json
check "tokenizer train: --vocab 800 -o writes the committed tokenizer, byte for byte" $?
tokenizer train --vocab 800 --kind sentencepiece "$dir/tok_train.txt" -o "$dir/sp.json" >/dev/null 2>&1 &&
  cmp -s "$dir/sp.json" tests/data/tokenizer/trained_sp.json
check "tokenizer train --kind sentencepiece: the committed tokenizer" $?

# Encode then decode gives the bytes back, for text and for random bytes, with both kinds and from tokenizer.bin.
head -c 3000 /dev/urandom >"$dir/random.bin"
for tok in "$dir/tok.json" "$dir/sp.json"; do
  for input in "$dir/tok_train.txt" "$dir/random.bin"; do
    tokenizer encode --tokenizer "$tok" "$input" -o "$dir/ids.txt" 2>/dev/null &&
      tokenizer decode --tokenizer "$tok" "$dir/ids.txt" -o "$dir/back.bin" && cmp -s "$input" "$dir/back.bin"
    check "tokenizer encode | decode: $(basename "$input") through $(basename "$tok") unchanged" $?
  done
done
tokenizer convert --tokenizer "$dir/sp.json" --to llama2c -o "$dir/tokenizer.bin" &&
  tokenizer encode --tokenizer "$dir/tokenizer.bin" "$dir/random.bin" -o "$dir/ids.txt" 2>/dev/null &&
  tokenizer decode --tokenizer "$dir/tokenizer.bin" "$dir/ids.txt" -o "$dir/back.bin" && cmp -s "$dir/random.bin" "$dir/back.bin"
check "tokenizer convert --to llama2c: the tokenizer.bin round-trips random bytes" $?
tokenizer convert --tokenizer "$dir/tok.json" --to gpt2 -o "$dir/vocab.json" &&
  out=$(tokenizer info --tokenizer "$dir/vocab.json" --show 1) &&
  grep -qx "byte-level BPE: 800 tokens (799 ordinary, 0 byte tokens, 1 special), 543 merges" <<<"$out" &&
  grep -qx "special 799: <|endoftext|> (BOS) (EOS)" <<<"$out"
check "tokenizer convert --to gpt2, info: vocab.json + merges.txt read back" $?
printf 'hi' >"$dir/hi.txt"
out=$(tokenizer encode --tokenizer "$dir/sp.json" --bos --eos "$dir/hi.txt" 2>/dev/null) &&
  [ "${out%% *}" = 1 ] && [ "${out##* }" = 2 ]
check "tokenizer encode --bos --eos: <s> first, </s> last ($out)" $?

out=$(tokenizer train --vocab 100 "$dir/tok_train.txt" -o "$dir/x.json" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qx "error: tokenizer train: a vocabulary of 100 is smaller than the 257 tokens the byte-level base needs" <<<"$out"
check "tokenizer train --vocab 100: refused, naming the base" $?
printf '{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}}' >"$dir/bad.json"
out=$(tokenizer info --tokenizer "$dir/bad.json" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "error: tokenizer.json: $dir/bad.json: the vocabulary has no token for the single byte 0" <<<"$out"
check "tokenizer info: a malformed tokenizer.json names the file and the problem" $?
printf '5 99999' >"$dir/bad_ids.txt"
out=$(tokenizer decode --tokenizer "$dir/tok.json" "$dir/bad_ids.txt" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qx "error: tokenizer: cannot decode id 99999: the vocabulary has ids 0..799" <<<"$out"
check "tokenizer decode: an id outside the vocabulary is refused by name" $?
out=$(tokenizer frobnicate 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qx "error: tokenizer: unknown subcommand 'frobnicate'" <<<"$out"
check "tokenizer: an unknown subcommand is refused" $?
