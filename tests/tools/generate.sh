# build/convert and build/generate (sourced by tests/tools.sh: convert, generate, train, check and $dir come from
# there). The fixtures of tests/fixtures/hf/ (tools/reference/hf_models.py): each *_reference.txt holds a prompt and
# the 32 tokens PyTorch's greedy decoding continues it with.
hf="$(dirname "${BASH_SOURCE[0]}")/../fixtures/hf"

# greedy_matches NAME CHECKPOINT: greedy generation from the reference's prompt gives the reference's tokens.
greedy_matches() {
  local prompt want out
  prompt=$(sed -n 1p "$hf/$1_reference.txt"); want=$(sed -n 2p "$hf/$1_reference.txt")
  out=$(generate "$2" --ids "$prompt" --max-tokens 32 --temperature 0 2>/dev/null)
  [ "$out" = "$want" ] || { echo "  $1: got  $out"; echo "  $1: want $want"; return 1; }
}
convert hf "$hf/gpt2-f16" "$dir/gpt2.st" 2>/dev/null; check "convert hf: GPT-2 from f16" $?
greedy_matches gpt2 "$dir/gpt2.st"; check "generate: GPT-2's 32 greedy tokens are PyTorch's" $?
convert hf "$hf/llama-bf16" "$dir/llama.st" 2>/dev/null; check "convert hf: sharded bf16 LLaMA" $?
greedy_matches llama "$dir/llama.st"; check "generate: LLaMA's 32 greedy tokens are PyTorch's" $?
convert llama2c "$hf/llama2c.bin" "$dir/llama2c.st" 2>/dev/null; check "convert llama2c" $?
greedy_matches llama2c "$dir/llama2c.st"; check "generate: llama2.c's 32 greedy tokens are PyTorch's" $?

# Sampling with every option: the same seed gives the same tokens, another seed others; the speed goes to stderr.
sample() { generate "$dir/llama.st" --ids 1,2,3 --max-tokens 24 --temperature 0.9 --top-k 20 --top-p 0.95 "$@"; }
a=$(sample --seed 7 2>"$dir/gen_err.txt"); b=$(sample --seed 7 2>/dev/null); c=$(sample --seed 8 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ]
check "generate: a seed reproduces the sample, another changes it" $?
grep -qE "^generate: 24 tokens in [0-9.]+ s, the prompt's 3 included: [0-9.]+ tokens/s \(recurrent form\)$" \
  "$dir/gen_err.txt"; check "generate: tokens/s on stderr ($(cat "$dir/gen_err.txt"))" $?

# A model trained here with the GPT-2 / LLaMA options (copy task: vocabulary 12, max_len 16).
train copy --layers 1 --d-model 16 --heads 4 --kv-heads 2 --seq-len 16 --steps 3 --eval-every 0 --threads 2 \
  --activation swiglu --bias false --tie-embeddings --embed-scale 1 --positional rotary --rope-theta 500 \
  --rope-pairing interleaved --norm-type rms --norm-eps 1e-5 --checkpoint "$dir/llamalike.st" >/dev/null 2>&1
check "train: a model with --activation swiglu --bias false --tie-embeddings --rope-pairing interleaved ..." $?
out=$(generate "$dir/llamalike.st" --ids 5,3,7 --max-tokens 8 --seed 1 2>/dev/null)
awk -F, '{ ok = NF == 8; for (i = 1; i <= NF; ++i) ok = ok && $i ~ /^[0-9]+$/ && $i < 12 }
         END { exit !(ok && NR == 1) }' <<<"$out"
check "generate: 8 in-vocabulary tokens from the model trained here ($out)" $?
# A variant without a recurrent form (image-2d without its width) says so on stderr; --recompute forces the
# recomputation, which gives the recurrent form's greedy tokens.
train copy --layers 1 --d-model 16 --heads 2 --seq-len 16 --steps 2 --eval-every 0 --threads 2 \
  --attention image-2d --checkpoint "$dir/image.st" >/dev/null 2>&1; check "train: an image-2d model" $?
out=$(generate "$dir/image.st" --ids 5,3,7,1 --max-tokens 1 --temperature 0 2>&1 >/dev/null)
grep -qF "generate: attention 'image-2d' has no recurrent form: recomputing the whole sequence for every token" \
  <<<"$out"; check "generate falls back to recomputation and says so" $?
train copy --layers 2 --d-model 16 --heads 2 --seq-len 16 --steps 2 --eval-every 0 --threads 2 \
  --attention talking-heads --checkpoint "$dir/talking.st" >/dev/null 2>&1; check "train: a talking-heads model" $?
stepped=$(generate "$dir/talking.st" --ids 5,3 --max-tokens 8 --temperature 0 2>/dev/null)
recomputed=$(generate "$dir/talking.st" --ids 5,3 --max-tokens 8 --temperature 0 --recompute 2>/dev/null)
[ -n "$stepped" ] && [ "$stepped" = "$recomputed" ]
check "generate --recompute: the recurrent form's greedy tokens ($stepped)" $?

# refused_by_generate ARGS... -- TEXT: exit status 1 and TEXT in the message.
refused_by_generate() {
  local args=() out rc
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  out=$(generate "${args[@]}" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$2" <<<"$out" || { echo "  generate ${args[*]}: exit $rc: $out"; return 1; }
}
refused_by_generate "$dir/llama.st" --ids 1 --top-p 0 -- \
  "error: generate: --top-p expects a finite number in (0, 1], got '0'"
check "generate refuses --top-p 0" $?
refused_by_generate "$dir/llama.st" --ids 1 --temperature -1 -- \
  "error: generate: --temperature expects a finite number in [0, 100], got '-1'"
check "generate refuses a negative temperature" $?
refused_by_generate "$dir/llama.st" --ids 1 --top-k -2 -- "--top-k expects an integer in 0..1073741824, got '-2'"
check "generate refuses a negative top-k" $?
refused_by_generate "$dir/llama.st" --ids 1,64 -- \
  "error: generate: --ids entry 2 expects an integer in 0..63, got '64'"
check "generate refuses an id outside the vocabulary" $?
refused_by_generate "$dir/llama.st" --ids 1 --prompt hi -- \
  "error: generate: give the prompt as --prompt or as --ids (one)"
check "generate refuses two prompts" $?
refused_by_generate "$dir/llama.st" --prompt hi -- "error: generate: --prompt as bytes needs a byte-level model"
check "generate refuses a byte prompt for a 64-token model" $?
refused_by_generate "$dir/llama.st" --ids 1,2 --max-tokens 64 -- \
  "error: generate: a prompt of 2 tokens and --max-tokens 64 run past the model's max_len of 64: at most 63 tokens"
check "generate refuses to run past max_len" $?
refused_by_generate "$dir/nothing.st" --ids 1 -- "$dir/nothing.st"
check "generate names a missing checkpoint" $?
refused_by_convert() {
  local args=() out rc
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  out=$(convert "${args[@]}" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$2" <<<"$out" || { echo "  convert ${args[*]}: exit $rc: $out"; return 1; }
}
refused_by_convert onnx "$hf" "$dir/x.st" -- "error: convert: FORMAT must be hf or llama2c, got 'onnx'"
check "convert refuses an unknown format" $?
refused_by_convert hf "$hf" "$dir/x.st" -- "error: convert: $hf/config.json: no such file"
check "convert hf names the missing config.json" $?
refused_by_convert llama2c "$hf/gpt2-f32/config.json" "$dir/x.st" -- "error: convert: $hf/gpt2-f32/config.json:"
check "convert llama2c refuses a file that is not one" $?

# Text in and out: a byte-level model (--prompt as bytes) and a BPE one (--tokenizer), each trained here.
train text --data README.md --layers 1 --d-model 16 --heads 2 --seq-len 32 --batch 4 --steps 2 --eval-every 0 \
  --threads 2 --checkpoint "$dir/bytes.st" >/dev/null 2>&1; check "train: a byte-level text model" $?
out=$(generate "$dir/bytes.st" --prompt "The " --max-tokens 12 --seed 3 2>/dev/null); rc=$?
[ $rc -eq 0 ] && [ "$(printf '%s' "$out" | wc -c)" -ge 1 ]; check "generate: bytes from a --prompt of bytes" $?
tok=tests/data/tokenizer/trained_gpt2.json
train text --data README.md --tokenizer "$tok" --layers 1 --d-model 16 --heads 2 --seq-len 32 --batch 4 --steps 2 \
  --eval-every 0 --threads 2 --checkpoint "$dir/bpe.st" >/dev/null 2>&1; check "train: a BPE text model" $?
a=$(generate "$dir/bpe.st" --tokenizer "$tok" --prompt "The model" --max-tokens 8 --seed 4 2>/dev/null); rc=$?
b=$(generate "$dir/bpe.st" --tokenizer "$tok" --prompt "The model" --max-tokens 8 --seed 4 2>/dev/null)
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]; check "generate --tokenizer: text, the same for the same seed" $?
refused_by_generate "$dir/bpe.st" --tokenizer tests/data/tokenizer/missing.json --prompt x -- "missing.json"
check "generate names a missing tokenizer" $?
