# build/train as a user runs it (sourced by tests/tools.sh: train, check and $dir come from there).
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
out=$(train "${small[@]}" --precision bf16 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "task copy, .*, bf16, 2 threads" <<<"$out"; check "--precision bf16 trains" $?
out=$(train "${small[@]}" --precision fp16 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "train: --precision: 'fp16' is not a precision; use fp32 or bf16" <<<"$out"
check "a bad --precision value" $?

# Resource and configuration errors: a clear message and exit status 1, never a crash.
out=$(train copy --d-model 1000000 --heads 1 --layers 1 --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: train: this run needs at least .* GiB (weights and optimizer state" <<<"$out"
check "an impossible model is refused with its memory estimate" $?
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

# Kill -9 mid-run, resume, compare with an uninterrupted run (same flags, same threads). The killed run's log keeps
# every row it wrote; the resumed run continues it: one header, each step once, elapsed_s never going back.
run=(copy --layers 2 --d-model 32 --heads 2 --seq-len 16 --steps 80 --batch 16 --dropout 0.1 --eval-every 20
     --checkpoint-every 5 --threads 2)
t0=$(date +%s%N)
train "${run[@]}" --checkpoint "$dir/straight.st" --log "$dir/straight.csv" >/dev/null 2>&1; check "uninterrupted run" $?
# The kill lands at a random moment within the uninterrupted run's duration (on this machine, in this build).
delay=$(awk -v s="$RANDOM" -v ns="$(($(date +%s%N) - t0))" 'BEGIN { srand(s); printf "%.2f", 0.05 + 0.9 * rand() * ns / 1e9 }')
# exec: the background job's PID is the training process itself, which SIGKILL must hit
(exec "${runner[@]}" "$build/train" "${run[@]}" --checkpoint "$dir/killed.st" --log "$dir/killed.csv" >/dev/null 2>&1) &
pid=$!
sleep "$delay"
kill -9 "$pid" 2>/dev/null && echo "tools test: killed train with SIGKILL after ${delay} s"
wait "$pid" 2>/dev/null
logged=$(($(wc -l <"$dir/killed.csv") - 1))
if [ -f "$dir/killed.st" ]; then
  at=$(awk -F, 'NR > 1 { s = $1 } END { print s + 0 }' "$dir/killed.csv")
  train "${run[@]}" --checkpoint "$dir/killed.st" --resume "$dir/killed.st" --log "$dir/killed.csv" >"$dir/resume.out" 2>&1 ||
    grep -q "is at step 80, not before --steps 80: nothing is left to train" "$dir/resume.out"  # it had finished
  rc=$?
  from=$(grep -o 'resumed from .* at step [0-9]*' "$dir/resume.out" | sed 's/.* //')
  check "resume after SIGKILL (from step ${from:-80, the run had finished}; the log had $logged rows, to step $at)" $rc
else
  train "${run[@]}" --checkpoint "$dir/killed.st" --log "$dir/killed.csv" >/dev/null 2>&1
  check "rerun (killed before a checkpoint; the log had $logged rows)" $?
fi
cmp -s "$dir/straight.st" "$dir/killed.st"; check "final checkpoint bit-identical to the uninterrupted run" $?
[ "$(cut -d, -f1,2 "$dir/killed.csv")" = "$(cut -d, -f1,2 "$dir/straight.csv")" ] &&
  awk -F, 'NR > 1 && $7 < e { exit 1 } NR > 1 { e = $7 }' "$dir/killed.csv"
check "the resumed log has the uninterrupted run's rows, with elapsed_s going on" $?
if [ -x "$build/bench" ]; then
  bench curves --svg "$dir/curves.svg" "$dir/killed.csv" >/dev/null 2>&1; check "bench curves reads the resumed log" $?
fi

# A checkpoint of another task (another vocabulary) is refused on resume, naming the tensor.
out=$(train text --data README.md --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 16 --steps 1 --threads 2 \
      --resume "$dir/straight.st" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "parameter 'embed.tokens.weight' has shape \[12, 32\], the model has \[256, 32\]" <<<"$out"
check "resume with another task's checkpoint (another vocabulary)" $?

# A checkpoint of the old form, the task's keys under "config." (tests/fixtures/old_form_copy.safetensors: step 4 of
# the flags below, written by train before the task's keys had the prefix "task."), resumes from its generator
# positions (54 and 6887): resumed to step 8 they stand at 58 and 6907, since the data generator moves one word per
# step and the model's one word per dropout call, 5 per step here (docs/distributed.md; they count draws, so they do
# not depend on the floating-point kernels). The resumed run writes the new form, and resuming through a new-form
# checkpoint at step 6 ends bit-identical; a task key that differs is refused; embed reads the model.
old=(copy --layers 1 --d-model 8 --heads 2 --d-ff 16 --seq-len 8 --symbols 5 --batch 4 --dropout 0.1 --threads 2
     --eval-every 0)
cp "$(dirname "${BASH_SOURCE[0]}")/../fixtures/old_form_copy.safetensors" "$dir/old_form.st"
out=$(train "${old[@]}" --steps 8 --resume "$dir/old_form.st" --checkpoint "$dir/old_form8.st" 2>&1) &&
  grep -q "resumed from $dir/old_form.st at step 4" <<<"$out" && meta=$(inspect "$dir/old_form8.st") &&
  grep -q "^  data_rng_position: 58$" <<<"$meta" && grep -q "^  model_rng_position: 6907$" <<<"$meta" &&
  grep -q "^  task.symbols: 5$" <<<"$meta" && grep -q "^  task.name: copy$" <<<"$meta" && ! grep -q "config.task" <<<"$meta"
check "an old-form checkpoint resumes to the old run's generator positions, written in the new form" $?
train "${old[@]}" --steps 6 --resume "$dir/old_form.st" --checkpoint "$dir/new_form.st" >/dev/null 2>&1 &&
  train "${old[@]}" --steps 8 --resume "$dir/new_form.st" --checkpoint "$dir/new_form.st" >/dev/null 2>&1 &&
  cmp -s "$dir/old_form8.st" "$dir/new_form.st"
check "resuming through the new form ends bit-identical to resuming the old form" $?
out=$(train "${old[@]}" --steps 8 --resume "$dir/old_form.st" --fixed-length 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: checkpoint $dir/old_form.st is for a different model: task.fixed_length = false in the \
checkpoint, true requested" <<<"$out"
check "an old-form checkpoint of other task flags is refused, naming the key" $?
out=$(embed "$dir/old_form.st" 1,2,3 3 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "^[0-6],[0-6],[0-6]$" <<<"$out"; check "embed reads an old-form checkpoint ($out)" $?

# ---- Hostile and careless input (issue 20): each case once exited 0 with nonsense, crashed, or lost data. ----
tiny=(--layers 1 --d-model 16 --heads 2 --seq-len 8 --threads 2)
out=$(train 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "^usage: train TASK \[flags\]" <<<"$out"; check "train with no arguments prints the usage" $?
# --checkpoint-every 0 divided by zero (SIGFPE); it now means a checkpoint at the end only.
out=$(train copy "${tiny[@]}" --steps 2 --checkpoint-every 0 --checkpoint "$dir/every0.st" 2>&1); rc=$?
[ $rc -eq 0 ] && [ -f "$dir/every0.st" ]; check "--checkpoint-every 0 saves at the end only" $?
out=$(train copy "${tiny[@]}" --steps 1 --fixed-length false 2>&1); rc=$?
[ $rc -eq 0 ]; check "a boolean flag takes 'false' as its value" $?
for bad in "--clip nan|--clip expects a finite number >= 0, got 'nan'" \
           "--d-ff -5|--d-ff expects an integer in 0..67108864, got '-5'" \
           "--threads 1099511627776|--threads expects an integer in 0..1024, got '1099511627776'" \
           "--eval-batches 0|--eval-batches expects an integer in 1..1048576, got '0'" \
           "--dropout 1|--dropout expects a finite number in [0, 1), got '1'"; do
  read -r -a flag <<<"${bad%%|*}"
  out=$(train copy "${flag[@]}" 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF "error: train: ${bad#*|}" <<<"$out"; check "train refuses ${bad%%|*}" $?
done

# The inputs of a run are never its outputs; outputs are regular files; a FIFO as input does not hang.
head -c 4000 README.md >"$dir/corpus.txt"
cp "$dir/corpus.txt" "$dir/corpus.orig"
out=$(train text --data "$dir/corpus.txt" --log "$dir/corpus.txt" "${tiny[@]}" --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: train: --log $dir/corpus.txt is the input --data of this run" <<<"$out" &&
  cmp -s "$dir/corpus.txt" "$dir/corpus.orig"; check "--log naming the corpus is refused, the corpus intact" $?
out=$(train copy "${tiny[@]}" --steps 1 --checkpoint "$dir/same" --log "$dir/same" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: train: --log and --checkpoint are the same file" <<<"$out"; check "two outputs on one file" $?
ln -s "$dir/corpus.orig" "$dir/link.csv"
out=$(train copy "${tiny[@]}" --steps 1 --log "$dir/link.csv" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "is a symbolic link, not a regular file: refusing to write over it" <<<"$out" &&
  cmp -s "$dir/corpus.txt" "$dir/corpus.orig"; check "a symbolic link as --log is refused" $?
out=$(train copy "${tiny[@]}" --steps 1 --log /dev/null 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "/dev/null is a character device, not a regular file" <<<"$out"; check "a device as --log is refused" $?
mkfifo "$dir/fifo"
out=$(timeout 20 "${runner[@]}" "$build/train" text --data "$dir/fifo" "${tiny[@]}" --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: text: $dir/fifo: is a FIFO, not a regular file" <<<"$out"; check "a FIFO as --data is refused at once" $?
out=$(train copy "${tiny[@]}" --steps 1 --checkpoint "$dir/no/such/dir/x.st" 2>&1); rc=$?
[ $rc -eq 1 ] && ! grep -q "^step" <<<"$out" && grep -q "cannot create the lock file" <<<"$out"
check "an unwritable checkpoint directory is refused before the first step" $?
out=$(train text --data "$dir/corpus.txt" "${tiny[@]}" --seq-len 300 --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && ! grep -q "^step" <<<"$out" && grep -q "the valid split holds 200 bytes, too few for a window of 300 + 1" <<<"$out"
check "a --seq-len longer than the validation split is refused before the first step" $?

# Two runs on one checkpoint: the second is refused while the first lives; the first's checkpoint stays sound.
(exec "${runner[@]}" "$build/train" copy "${tiny[@]}" --steps 100000 --checkpoint-every 20 --eval-every 0 \
   --checkpoint "$dir/shared.st" >/dev/null 2>&1) &
holder=$!
for _ in $(seq 100); do [ -f "$dir/shared.st" ] && break; sleep 0.1; done
out=$(train copy "${tiny[@]}" --steps 40 --checkpoint "$dir/shared.st" 2>&1); rc=$?
kill -9 "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
[ $rc -eq 1 ] && grep -q "error: train: --checkpoint $dir/shared.st is in use by another running process (pid $holder;" <<<"$out"
check "a second run on a checkpoint in use is refused, naming the holder" $?
out=$(train copy "${tiny[@]}" --steps 100000 --checkpoint "$dir/shared.st" --resume "$dir/shared.st" --max-minutes 0.001 2>&1)
check "the first run's checkpoint resumes after it was killed" $?
# A temporary file of a killed writer is removed by the next run; one of a live process is not.
dead=$(bash -c 'echo $$')
touch "$dir/stale.st.tmp.$dead.0" "$dir/stale.st.tmp.$$.0"
train copy "${tiny[@]}" --steps 1 --checkpoint "$dir/stale.st" >/dev/null 2>&1
[ ! -e "$dir/stale.st.tmp.$dead.0" ] && [ -e "$dir/stale.st.tmp.$$.0" ]; check "stale temporary checkpoint files are removed" $?
out=$(train copy "${tiny[@]}" --steps 1 --resume "$dir/stale.st" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "is at step 1, not before --steps 1: nothing is left to train" <<<"$out"
check "resuming a finished run is refused, not reported as eval loss 0" $?

# The CSV log: rows reach the file as they are logged; a write error stops the run; the final line and a sample.
out=$( (ulimit -f 2; trap '' XFSZ; train copy "${tiny[@]}" --steps 300 --log-every 1 --eval-every 0 --log "$dir/full.csv") 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "error: train: cannot write the log $dir/full.csv: File too large" <<<"$out"; check "a log write error stops the run" $?
out=$(train text --data README.md "${tiny[@]}" --seq-len 32 --steps 2 --eval-every 2 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "^final: step 2, wall [0-9.]+ s, eval loss [0-9.]+ \([0-9.]+ bits/char\), accuracy [0-9.]+%$" <<<"$out" &&
  [ "$(grep -A1 '^final:' <<<"$out" | tail -1 | cut -c1-10)" = "  sample: " ]
check "train text: the final figures on one line, the sample on the next" $?

# Memory: refused from the estimate before anything is allocated, or by the allocator's limit with a message.
out=$(train ctc --max-duration 1000000 --steps 1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: train: this run needs at least .* GiB .* more than the .* GiB of memory available" <<<"$out"
check "ctc --max-duration 1000000 is refused with its estimate" $?
if [ -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
  out=$(train pixels --mixtures 100000 --steps 1 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q "error: train: this run needs at least .* GiB (.* outputs [0-9.]* GiB" <<<"$out"
  check "pixels --mixtures 100000 is refused with its estimate" $?
fi
out=$(train copy --layers 2 --d-model 64 --heads 2 --seq-len 64 --batch 32 --steps 2 --threads 2 --max-memory 0.02 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: train: step 1: allocator: out of memory allocating .* limit .* bytes: --max-memory 0.02 GiB)" <<<"$out"
check "an allocation beyond --max-memory fails with the allocator's message" $?
