# build/quantize, inference-only quantized checkpoints (sourced by tests/tools.sh: quantize, embed, inspect, train,
# check and $dir come from there). A small copy-task checkpoint of its own, d_model 32 so that its weights quantize.
train copy --layers 1 --d-model 32 --heads 2 --d-ff 64 --seq-len 16 --steps 5 --eval-every 0 --threads 2 \
  --checkpoint "$dir/quant_f32.st" >/dev/null 2>&1; check "quantize: a checkpoint to quantize" $?
for format in q8_0 q4_0; do
  out=$(quantize "$dir/quant_f32.st" "$dir/quant_$format.st" --format $format 2>&1)
  # 4 attention projections, 2 FFN layers, the head and the token table; q4_0 keeps 4 of them in q8_0.
  kept=$([ $format = q4_0 ] && echo "4 tensors in q4_0, 4 in q8_0 (token tables, head" || echo "8 tensors in q8_0;")
  grep -qF "quant_$format.st: $kept" <<<"$out"; check "quantize --format $format ($out)" $?
  out=$(inspect "$dir/quant_$format.st" 2>&1)
  grep -qE "^model\.layers0\.ffn\.fc1\.weight  U8  \[64, 1, (36|20)\]  $format blocks of \[64, 32\]$" <<<"$out" &&
    grep -qF "quant.model.head.weight: q8_0" <<<"$out" && grep -qF "checksum: intact" <<<"$out" &&
    ! grep -q "^optim\." <<<"$out"
  check "inspect shows the $format tensors, their format and no optimizer state" $?
  out=$(embed "$dir/quant_$format.st" 5,3,7 4 2>&1); rc=$?
  [ $rc -eq 0 ] && grep -qE '^[0-9]+(,[0-9]+){3}$' <<<"$out"; check "embed generates from the $format checkpoint ($out)" $?
done
out=$(quantize "$dir/quant_f32.st" "$dir/quant_pure.st" --format q4_0 --pure 2>&1 && inspect "$dir/quant_pure.st" 2>&1)
grep -qF "quant_pure.st: 8 tensors in q4_0;" <<<"$out" && grep -qF "quant.model.head.weight: q4_0" <<<"$out"
check "quantize --format q4_0 --pure quantizes every weight in q4_0" $?
out=$(train copy --layers 1 --d-model 32 --heads 2 --d-ff 64 --seq-len 16 --steps 10 --eval-every 0 --threads 2 \
  --checkpoint "$dir/quant_q8_0.st" --resume "$dir/quant_q8_0.st" 2>&1)
[ $? -eq 1 ] && grep -qF "holds quantized weights (an inference-only file written by quantize)" <<<"$out"
check "train refuses to resume from a quantized checkpoint" $?
out=$(quantize "$dir/quant_f32.st" "$dir/quant_x.st" --format q5_1 2>&1)
[ $? -eq 1 ] && grep -qF "error: quantize: --format expects q8_0 or q4_0, got 'q5_1'" <<<"$out"
check "quantize refuses an unknown format" $?
out=$(quantize "$dir/quant_q8_0.st" "$dir/quant_x.st" 2>&1)
[ $? -eq 1 ] && grep -qF "is quantized already; quantize its f32 checkpoint" <<<"$out"
check "quantize refuses a quantized checkpoint" $?
