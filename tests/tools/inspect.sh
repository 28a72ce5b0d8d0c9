# build/inspect (sourced by tests/tools.sh: inspect, train, check and $dir come from there): the checksum verdict
# and strings from the file kept from the terminal.

# write_safetensors FILE HEADER: a safetensors file by hand, the header's length (8 bytes, little-endian), the
# JSON header, then 4 zero bytes of tensor data.
write_safetensors() {
  local n=${#2}
  printf "\\$(printf %03o $((n % 256)))\\$(printf %03o $((n / 256)))\\0\\0\\0\\0\\0\\0%s\\0\\0\\0\\0" "$2" >"$1"
}
tensor='"dtype":"F32","shape":[1],"data_offsets":[0,4]'

train copy --layers 1 --d-model 8 --heads 2 --seq-len 8 --steps 1 --eval-every 0 --threads 2 \
  --checkpoint "$dir/inspect.st" >/dev/null 2>&1; check "inspect: a checkpoint to look at" $?
out=$(inspect "$dir/inspect.st" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -Eq "^checksum: intact \(CRC-32 [0-9a-f]{8}\)$" <<<"$out" &&
  grep -q "^model.head.weight  F32  \[12, 8\]$" <<<"$out"
check "inspect: a checkpoint as saved is intact" $?
# The last byte of the file is the last tensor's data: flip one bit of it.
size=$(wc -c <"$dir/inspect.st")
last=$(tail -c 1 "$dir/inspect.st" | od -An -tu1 | tr -d ' ')
cp "$dir/inspect.st" "$dir/corrupt.st"
printf "\\$(printf %03o $((last ^ 1)))" | dd of="$dir/corrupt.st" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
out=$(inspect "$dir/corrupt.st" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -Eq "^checksum: CORRUPT: the tensor data has CRC-32 [0-9a-f]{8}, the header records [0-9a-f]{8}$" \
  <<<"$out" && grep -q "^total: " <<<"$out"
check "inspect: a flipped bit is CORRUPT, exit status 1 after the listing" $?
# CRC-32 of four zero bytes is 2144df1c (zlib.crc32(bytes(4))): a reference that shares no code with ours.
write_safetensors "$dir/zeros.st" '{"__metadata__":{"checksum.crc32":"2144df1c"},"t":{'"$tensor"'}}'
out=$(inspect "$dir/zeros.st" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qx "checksum: intact (CRC-32 2144df1c)" <<<"$out"; check "inspect: CRC-32 against zlib's" $?
write_safetensors "$dir/plain.st" '{"t":{'"$tensor"'}}'
out=$(inspect "$dir/plain.st" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qx "checksum: none recorded (not written by save_checkpoint)" <<<"$out"
check "inspect: a file without a checksum says so" $?

# Escape sequences in a key, a value and a tensor name reach the terminal as text.
write_safetensors "$dir/hostile.st" \
  '{"__metadata__":{"k\u001b[2J":"\u001b]0;owned\u0007"},"t\u009b31m":{'"$tensor"'}}'
out=$(inspect "$dir/hostile.st" 2>&1); rc=$?
[ $rc -eq 0 ] && ! grep -q $'[\e\a]' <<<"$out" && grep -qF 'k\x1b[2J: \x1b]0;owned\x07' <<<"$out" &&
  grep -qF 't\xc2\x9b31m  F32  [1]' <<<"$out"
check "inspect: control characters from the file are printed as \\xNN" $?

out=$(inspect --help); rc=$?
[ $rc -eq 0 ] && grep -qF "usage: inspect [flags] FILE.safetensors" <<<"$out" && grep -q -- "--stats" <<<"$out"
check "inspect --help" $?
out=$(inspect 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "error: inspect: no file given (usage: inspect [flags] FILE.safetensors)" <<<"$out"
check "inspect without a file" $?
out=$(timeout 10 "${runner[@]}" "$build/inspect" /dev/zero 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "/dev/zero: is a character device, not a regular file" <<<"$out"
check "inspect refuses /dev/zero at once" $?
# --strip: the inference-only copy holds no optimizer state and a checksum of its own; a corrupt input is refused.
inspect --strip "$dir/stripped.st" "$dir/inspect.st" >/dev/null 2>&1; rc=$?
out=$(inspect "$dir/stripped.st" 2>&1)
[ $rc -eq 0 ] && grep -Eq "^checksum: intact" <<<"$out" && ! grep -q "^optim\." <<<"$out" &&
  ! grep -q "^  optimizer" <<<"$out" && grep -q "^model.head.weight  F32  \[12, 8\]$" <<<"$out"
check "inspect --strip: parameters without optimizer state, intact" $?
out=$(inspect --strip "$dir/stripped2.st" "$dir/corrupt.st" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "inspect: --strip: $dir/corrupt.st has no intact checksum" <<<"$out" && [ ! -e "$dir/stripped2.st" ]
check "inspect --strip refuses a corrupt input" $?
