# build/bench as a user runs it (sourced by tests/tools.sh: bench, check and $dir come from there): nonsense
# refused by name with exit status 1, never a crash or an empty table; untrusted file names kept out of the SVG's
# markup and the terminal. Every run here is tiny.

# refused BENCH-ARGS... -- TEXT: exit status 1 and TEXT in the message.
refused() {
  local args=() out rc
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  out=$(timeout 20 "${runner[@]}" "$build/bench" "${args[@]}" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$2" <<<"$out" || { echo "  bench ${args[*]}: exit $rc: $out"; return 1; }
}

refused attention --variants linear --min-log2 9 --max-log2 9 --reps 0 -- \
  "error: bench attention: --reps expects an integer in 1..1000000, got '0'"; check "bench attention --reps 0" $?
refused attention --min-log2 10 --max-log2 9 -- \
  "error: bench attention: --min-log2 10 is above --max-log2 9: no sequence length to measure"
check "bench attention --min-log2 above --max-log2" $?
refused attention --min-log2 -1 --max-log2 0 -- "bench attention: --min-log2 expects an integer in 0..24, got '-1'"
check "bench attention --min-log2 -1" $?
out=$(bench attention --variants linear --min-log2 2 --max-log2 3 --heads 1 --head-dim 4 --tokens 8 --reps 1 \
      --threads 1 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(grep -Ec '^ +[48] ' <<<"$out")" -eq 2 ]; check "bench attention measures N = 4 and 8" $?

refused generate --tokens 16 --layers 1 --d-model 16 --heads 2 --batch 1 --naive-samples 0 -- \
  "error: bench generate: --naive-samples expects an integer in 2..65536, got '0'"
check "bench generate --naive-samples 0" $?
refused generate --tokens abc -- "error: bench generate: --tokens expects an integer in 1..1048576, got 'abc'"
check "bench generate --tokens abc names the flag" $?
refused generate --tokens 8,,16 -- "error: bench generate: --tokens expects an integer in 1..1048576, got ''"
check "bench generate --tokens with an empty item" $?
refused generate --tokens 16 --batch 0 -- "error: bench generate: --batch expects an integer in 1..65536, got '0'"
check "bench generate --batch 0" $?
refused generate --modes '' -- "error: bench generate: --modes is empty"; check "bench generate --modes ''" $?
refused generate --modes star -- "error: attention 'star': does not take a causal mask"
check "bench generate --modes star (no causal form) refused by the variant" $?
refused generate --modes bp-transformer -- "has no recurrent form for generation: token t reads the span nodes"
check "bench generate --modes bp-transformer refused with the reason" $?
# band's state is a ring of window + 1 positions, longformer's that plus the global prefix: the same bytes per layer
# at 16 and 64 tokens, softmax's cache grows.
out=$(bench generate --tokens 16,64 --layers 1 --d-model 16 --heads 2 --batch 1 --threads 1 \
  --modes stateful,band:window=2:block=4,longformer:window=2:globals=2:block=4 2>&1); rc=$?
band=$(awk '$1 == "band:window=2:block=4" { print $NF }' <<<"$out" | sort -u | wc -l)
longformer=$(awk '$1 == "longformer:window=2:globals=2:block=4" { print $NF }' <<<"$out" | sort -u | wc -l)
cache=$(awk '$1 == "stateful" { print $NF }' <<<"$out" | sort -u | wc -l)
[ $rc -eq 0 ] && [ "$band" -eq 1 ] && [ "$longformer" -eq 1 ] && [ "$cache" -eq 2 ] || echo "$out"
check "bench generate VARIANT: band's and longformer's state bytes flat in the length, softmax's grow" $?

small_train=(train --layers 1 --d-model 8 --heads 2 --d-ff 8 --vocab 8 --batch 1 --seq-len 4 --threads 1)
refused train --steps 0 -- "error: bench train: --steps expects an integer in 1..1000000, got '0'"
check "bench train --steps 0" $?
out=$(bench "${small_train[@]}" --steps 1 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "tokens/s, peak memory" <<<"$out" && ! grep -Eqi "comparison|anchors|shared" <<<"$out"
check "bench train prints only what it measured" $?
out=$(bench "${small_train[@]}" --steps 1 --precision bf16 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "attention softmax, bf16, 1 threads" <<<"$out"; check "bench train --precision bf16" $?
refused "${small_train[@]}" --steps 1 --precision f16 -- \
  "error: bench train: --precision: 'f16' is not a precision; use fp32 or bf16"
check "bench train --precision f16" $?
# --python reaches a shell: it must stay one word, never run what follows a ';'.
refused "${small_train[@]}" --steps 1 --vs-torch --python "$dir/no python; touch $dir/injected" -- \
  "error: bench train --vs-torch:"
check "bench train --vs-torch with a missing --python fails naming it" $?
[ ! -e "$dir/injected" ]; check "bench train --python is not run as shell commands" $?

refused gemm --rounds 0 -- "error: bench gemm: --rounds expects an integer in 1..1048576, got '0'"
check "bench gemm --rounds 0" $?
refused gemm --budget nan -- "error: bench gemm: --budget expects a finite number in [0, 3600], got 'nan'"
check "bench gemm --budget nan" $?
refused ops --reps 0 -- "error: bench ops: --reps expects an integer in 1..1000000, got '0'"; check "bench ops --reps 0" $?
refused spectrum --sequences 0 -- "error: bench spectrum: --sequences expects an integer in 1..4096, got '0'"
check "bench spectrum --sequences 0" $?
refused ops --kernels , -- "error: bench ops: --kernels names no kernel (known: add,"
check "bench ops --kernels without a name" $?
refused ops stray -- "bench ops: unexpected argument 'stray'"; check "bench ops takes no arguments" $?
# std::bad_alloc reaches the user as a sentence. (Under AddressSanitizer a failed operator new aborts instead.)
case "$build" in
  *san*) ;;
  *)
    refused ops --rows 16777216 --cols 16777216 --kernels add --reps 1 --threads 1 -- \
      "error: bench ops: out of memory (lower the sizes its flags ask for)"
    check "bench ops: out of memory is a message" $?
    ;;
esac

refused mask --n 1000000 --png "$dir/mask.png" -- "error: bench mask: --n expects an integer in 1..16384, got '1000000'"
check "bench mask --n 1000000" $?
refused mask --n 8192 --pixel 4 --png "$dir/mask.png" -- \
  "error: bench mask: --n 8192 x --pixel 4 is 32768 pixels a side, over the 16384 this tool draws"
check "bench mask refuses a picture too tall to draw" $?
refused mask --n 2048 --pixel 4 --heads 3 --png "$dir/mask.png" -- \
  "error: bench mask: 3 panels of 8192 pixels make a picture 24592 pixels wide, over the 16384 this tool draws"
check "bench mask refuses a picture too wide to draw" $?
out=$(bench mask --n 64 --png "$dir/mask.png" 2>&1); rc=$?
[ $rc -eq 0 ] && [ -s "$dir/mask.png" ]; check "bench mask draws a small pattern" $?

# bench curves: logs named by hostile file names, and files that are not logs.
out=$(bench curves --help); rc=$?
[ $rc -eq 0 ] && grep -qF "usage: bench curves [flags] [NAME=]LOG.csv ..." <<<"$out" &&
  grep -qF "arguments:" <<<"$out"
check "bench curves --help lists its arguments" $?
log=$'a<b>&\'"\e[31m.csv'
printf 'step,kind,loss,accuracy\n1,eval,2.5,0.1\n2,train,9,0\n3,eval,nan,0.2\n4,eval,1.5,0.3\n' >"$dir/$log"
out=$(bench curves --svg "$dir/plot.svg" --title '<script>x</script>' "$dir/$log" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qF "a&lt;b&gt;&amp;&apos;&quot;[31m.csv</text>" "$dir/plot.svg" &&
  grep -qF "&lt;script&gt;x&lt;/script&gt;</text>" "$dir/plot.svg" && ! grep -q "<script" "$dir/plot.svg" &&
  ! grep -q $'\e' "$dir/plot.svg"
check "bench curves escapes names and titles in the SVG" $?
grep -qF 'a<b>&'"'"'"\x1b[31m.csv' <<<"$out" && ! grep -q $'\e' <<<"$out" && grep -qF "3 points" <<<"$out"
check "bench curves prints a file name's control characters as \\xNN" $?
! ls "$dir" | grep -q '\.tmp'; check "bench curves leaves no temporary file" $?
mkfifo "$dir/fifo.csv"
refused curves --svg "$dir/f.svg" "$dir/fifo.csv" -- "bench curves: $dir/fifo.csv: is a FIFO, not a regular file"
check "bench curves refuses a FIFO at once" $?
refused curves --svg "$dir/f.svg" /dev/zero -- "bench curves: /dev/zero: is a character device, not a regular file"
check "bench curves refuses /dev/zero" $?
refused curves --svg "$dir/f.svg" "$dir" -- "bench curves: $dir: is a directory, not a regular file"
check "bench curves refuses a directory" $?
refused curves --svg "$dir" "$dir/$log" -- "svg plot: $dir is a directory"
check "bench curves will not write its SVG over a directory" $?
printf 'step,kind,loss\n1,eval,2\n' >"$dir/input.csv"
refused curves --svg "$dir/./input.csv" "run=$dir/input.csv" -- \
  "error: bench curves: --svg $dir/./input.csv is the log $dir/input.csv it reads: refusing to write over it" &&
  [ "$(head -1 "$dir/input.csv")" = "step,kind,loss" ]; check "bench curves will not write its SVG over a log it reads" $?
printf 'step,kind,loss\n1,eval,2.5\n2,eval,0x1p\n' >"$dir/bad.csv"
refused curves --svg "$dir/f.svg" "$dir/bad.csv" -- \
  "error: bench curves: $dir/bad.csv:3: loss expects a finite number, got '0x1p'"
check "bench curves names the file, row and column of a bad number" $?
# Steps 16 apart at 1e17 are one spacing of doubles: the axis must still end (it looped forever).
printf 'step,kind,loss\n100000000000000000,eval,2\n100000000000000016,eval,1\n' >"$dir/flat.csv"
out=$(timeout 10 "${runner[@]}" "$build/bench" curves --svg "$dir/flat.svg" "$dir/flat.csv" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "</svg>" "$dir/flat.svg"; check "bench curves plots steps one double apart" $?
refused curves "$dir/flat.csv" -- "error: bench curves: --svg OUT.svg is required"; check "bench curves without --svg" $?

# Nothing the project prints or documents points outside the repository (a clone has no ../shared).
top="$(dirname "${BASH_SOURCE[0]}")/../.."
! grep -rnE "\.\./shared|anchors\.md" "$top"/{tools,engine,ops,models,datasets,docs,README.md,Makefile,.ci}
check "code and docs refer to nothing outside the repository" $?
refused quant --text "$dir/none.st" -- "bench quant: --text needs --data, the file it was trained on"
check "bench quant --text without --data" $?
refused quant --copy "$dir/none.st" -- "none.st"
check "bench quant --copy names a missing checkpoint" $?
