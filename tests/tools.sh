#!/usr/bin/env bash
# Tests of the training tool as a user runs it: non-finite guards, and a run killed with SIGKILL at a
# random moment that resumes from its last checkpoint to bit-identical final weights, and the embedding
# example (tools/embed.cpp) generating from the checkpoint.
# Usage: tests/tools.sh BUILD_DIR (make test runs it after the doctest suite).
set -uo pipefail
build=${1:?usage: tests/tools.sh BUILD_DIR}
# Under AddressSanitizer an impossible allocation aborts unless the allocator may return null, as libc's does.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
read -r -a runner <<<"${ENG_RUN:-}"  # e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu" for a cross build
train() { "${runner[@]}" "$build/train" "$@"; }
embed() { "${runner[@]}" "$build/embed" "$@"; }
dir=$(mktemp -d /tmp/eng_tools_test.XXXXXX)
trap 'rm -rf "$dir"' EXIT
failures=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" -eq 0 ]; then echo "tools test: ok   $1"; else echo "tools test: FAIL $1"; failures=$((failures + 1)); fi
}
small=(copy --layers 1 --d-model 16 --heads 2 --seq-len 8 --steps 5 --eval-every 0 --log-every 1 --threads 2)

# A learning rate of 1e30 makes the step-1 update finite but the step-2 logits infinite.
out=$(train "${small[@]}" --lr 1e30 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "error: train: step 2: the loss is nan; stopped" <<<"$out"; check "--on-nan stop exits 1 naming the step" $?
out=$(train "${small[@]}" --lr 1e30 --on-nan skip 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "4 steps skipped (non-finite)" <<<"$out"; check "--on-nan skip drops the bad steps" $?
out=$(train "${small[@]}" --lr 1e30 --detect-anomaly 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "error: train: step 2: anomaly: op '.*' produced .* from finite inputs" <<<"$out"
check "--detect-anomaly names the op" $?
out=$(train "${small[@]}" --on-nan maybe 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "train: --on-nan must be stop or skip, got 'maybe'" <<<"$out"; check "a bad --on-nan value" $?

# Resource and configuration errors: a clear message and exit status 1, never a crash.
out=$(train copy --d-model 1000000000 --heads 1 --layers 1 --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: allocator: out of memory allocating" <<<"$out"; check "an impossible allocation" $?
out=$(train copy --d-model 30 --heads 4 --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: config: d_model 30 is not divisible by heads 4" <<<"$out"; check "d_model % heads" $?

# Character-level LM on a text file (this repository's README): bits per character on validation and test.
out=$(train text --data README.md --layers 1 --d-model 16 --heads 2 --seq-len 32 --batch 8 --steps 20 \
      --eval-every 10 --threads 2 --attention causal-linear 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "eval @ 20: loss [0-9.]+ \([0-9.]+ bits/char\)" <<<"$out" &&
  grep -Eq "^test: [0-9.]+ bits/char over [0-9]+ characters" <<<"$out"
check "train text reports bits per character" $?
# --device cuda: refused with the reason in a build without CUDA (a CUDA build may have a device to train on).
case "$build" in
  *cuda*) ;;
  *)
    out=$(train text --data README.md --steps 1 --device cuda 2>&1); rc=$?
    [ $rc -eq 1 ] && grep -q "error: train: --device cuda: eng was built without CUDA (rebuild with make CUDA=1)" <<<"$out"
    check "--device cuda in a build without CUDA says why" $?
    ;;
esac
out=$(train text --data README.md --steps 1 --device gpu 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "train: --device must be cpu or cuda, got 'gpu'" <<<"$out"; check "a bad --device value" $?
out=$(train text --steps 1 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "train: task text needs --data FILE" <<<"$out"; check "train text without --data" $?
# Transformer-XL: streams of segments with a memory; the test split scored with and without it.
out=$(train text --data README.md --layers 1 --d-model 16 --heads 2 --seq-len 16 --batch 4 --steps 6 \
      --eval-every 6 --threads 2 --positional relative --mem-len 16 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "^test: [0-9.]+ bits/char over [0-9]+ characters \([0-9]+ windows, no memory\)" <<<"$out" &&
  grep -Eq "^test with memory: [0-9.]+ bits/char over [0-9]+ characters \(4 streams, memory 16\)" <<<"$out"
check "train text --mem-len scores the test split with the memory" $?
out=$(train text --data README.md --mem-len 16 --positional relative --resume x.ckpt --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "train: --resume with --mem-len is not supported" <<<"$out"; check "--mem-len refuses --resume" $?
# Masked character LM with attention that cannot be causal.
out=$(train mlm --data README.md --layers 1 --d-model 16 --heads 2 --seq-len 32 --batch 4 --steps 4 \
      --eval-every 4 --threads 2 --attention linformer 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "eval @ 4: loss [0-9.]+ \([0-9.]+ bits/masked char\)" <<<"$out" &&
  grep -Eq "^test: [0-9.]+ bits per masked character over [0-9]+ masked characters" <<<"$out"
check "train mlm with linformer reports bits per masked character" $?
# adaptive-span trains with its span penalty added to the loss.
out=$(train text --data README.md --layers 1 --d-model 16 --heads 2 --seq-len 16 --batch 4 --steps 4 \
      --eval-every 4 --threads 2 --attention adaptive-span 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "^test: [0-9.]+ bits/char" <<<"$out"; check "train text --attention adaptive-span" $?

# The CTC acoustic model and the image classifier: report lines, and a run stopped at step 4 and resumed to
# step 8 ending in the same checkpoint as a straight run (dropout on, so the model generator is replayed too).
ctc=(ctc --layers 1 --d-model 16 --heads 2 --batch 8 --eval-every 4 --log-every 2 --threads 2 --dropout 0.1
     --phonemes 9 --test-utterances 60)
out=$(train "${ctc[@]}" --steps 8 --checkpoint-every 4 --checkpoint "$dir/ctc_straight.st" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "eval @ 8: loss [0-9.]+, accuracy [0-9.]+%, label error rate [0-9.]+%" <<<"$out" &&
  grep -Eq "^test: label error rate [0-9.]+% over 60 utterances \([0-9]+ edits / [0-9]+ labels\)" <<<"$out"
check "train ctc reports the label error rate" $?
train "${ctc[@]}" --steps 4 --checkpoint "$dir/ctc.st" >/dev/null 2>&1 &&
  train "${ctc[@]}" --steps 8 --checkpoint "$dir/ctc.st" --resume "$dir/ctc.st" >/dev/null 2>&1 &&
  cmp -s "$dir/ctc_straight.st" "$dir/ctc.st"
check "train ctc resumed from step 4 ends bit-identical" $?
out=$(train "${ctc[@]}" --steps 1 --symbols 5 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: train: --symbols is for the copy, reverse and sort tasks, not 'ctc'" <<<"$out"
check "train ctc refuses a flag it does not read" $?
out=$(train copy --steps 1 --phonemes 5 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: train: --phonemes is for the ctc task, not 'copy'" <<<"$out"
check "train copy refuses a ctc flag" $?
if [ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
  cls=(classify --layers 1 --d-model 16 --heads 2 --batch 8 --eval-every 4 --log-every 2 --threads 2 --dropout 0.1
       --test-images 50)
  out=$(train "${cls[@]}" --steps 8 --checkpoint-every 4 --checkpoint "$dir/cls_straight.st" 2>&1); rc=$?
  [ $rc -eq 0 ] && grep -Eq "eval @ 8: loss [0-9.]+, accuracy [0-9.]+%$" <<<"$out" &&
    grep -Eq "^test: accuracy [0-9.]+% over the first 50 test images" <<<"$out"
  check "train classify reports the test accuracy" $?
  train "${cls[@]}" --steps 4 --checkpoint "$dir/cls.st" >/dev/null 2>&1 &&
    train "${cls[@]}" --steps 8 --checkpoint "$dir/cls.st" --resume "$dir/cls.st" >/dev/null 2>&1 &&
    cmp -s "$dir/cls_straight.st" "$dir/cls.st"
  check "train classify resumed from step 4 ends bit-identical" $?
  # 9 phonemes + blank = 10 classes and 16 features = 4 x 4 patches: every tensor has the classifier's shape,
  # so the configuration check is what refuses the ctc checkpoint.
  out=$(train "${cls[@]}" --steps 1 --resume "$dir/ctc.st" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "error: checkpoint $dir/ctc.st is for a different model" <<<"$out"
  check "train classify refuses a ctc checkpoint" $?
  out=$(train classify --patch 5 --steps 1 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "error: train: --patch 5 must divide the 28x28 images" <<<"$out"
  check "train classify refuses a patch that does not divide the image" $?
else
  echo "tools test: skip train classify (Fashion-MNIST is not installed: make data)"
fi

# Kill -9 mid-run, resume, compare with an uninterrupted run (same flags, same threads).
run=(copy --layers 2 --d-model 32 --heads 2 --seq-len 16 --steps 200 --batch 16 --dropout 0.1 --eval-every 50
     --checkpoint-every 10 --threads 2)
train "${run[@]}" --checkpoint "$dir/straight.st" >/dev/null 2>&1; check "uninterrupted run" $?
delay=$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 0.3 + 2.5 * rand() }')
# exec: the background job's PID is the training process itself, which SIGKILL must hit
(exec "${runner[@]}" "$build/train" "${run[@]}" --checkpoint "$dir/killed.st" >/dev/null 2>&1) &
pid=$!
sleep "$delay"
kill -9 "$pid" 2>/dev/null && echo "tools test: killed train with SIGKILL after ${delay} s"
wait "$pid" 2>/dev/null
if [ -f "$dir/killed.st" ]; then
  train "${run[@]}" --checkpoint "$dir/killed.st" --resume "$dir/killed.st" >"$dir/resume.out" 2>&1
  check "resume after SIGKILL ($(grep -o 'resumed from .* at step [0-9]*' "$dir/resume.out" | sed 's/.* //'))" $?
else
  train "${run[@]}" --checkpoint "$dir/killed.st" >/dev/null 2>&1; check "rerun (killed before a checkpoint)" $?
fi
cmp -s "$dir/straight.st" "$dir/killed.st"; check "final checkpoint bit-identical to the uninterrupted run" $?

# A checkpoint of another task (another vocabulary) is refused on resume, naming the tensor.
out=$(train text --data README.md --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 16 --steps 1 --threads 2 \
      --resume "$dir/straight.st" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "parameter 'embed.tokens.weight' has shape \[12, 32\], the model has \[256, 32\]" <<<"$out"
check "resume with another task's checkpoint (another vocabulary)" $?

# The embedding example continues a prompt from the trained checkpoint (vocabulary 12: 10 symbols + 2).
out=$(embed "$dir/straight.st" 5,3,7,2,1 4 2>&1); rc=$?
[ $rc -eq 0 ] && awk -F, '{ ok = NF == 4; for (i = 1; i <= NF; ++i) ok = ok && $i ~ /^[0-9]+$/ && $i < 12 }
                           END { exit !(ok && NR == 1) }' <<<"$out"
check "embed generates 4 in-vocabulary tokens ($out)" $?
out=$(embed "$dir/straight.st" 5,x 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "error: embed: prompt entry 'x' is not a token id" <<<"$out"; check "embed refuses a bad prompt" $?

[ $failures -eq 0 ] || { echo "tools test: $failures failed"; exit 1; }
echo "tools test: all passed"
