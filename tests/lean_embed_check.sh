#!/usr/bin/env bash
# The lean embed of `make embed VARIANTS=softmax ISA=avx2` (.ci/run): the full build's ids at the same kernel level
# (ENG_CPU=avx2), no causal-linear and no AVX-512 table in its link, and its size within MAX_BYTES: a change that
# adds to the static program fails CI until the budget is raised on purpose (docs/embedding.md: what the bytes are).
# Usage: tests/lean_embed_check.sh BUILD MAX_BYTES
set -euo pipefail
build=${1:?usage: tests/lean_embed_check.sh BUILD MAX_BYTES} max=${2:?}
lean=$build/embed-lean/embed map=$build/embed-lean/embed.map
dir=$(mktemp -d /tmp/eng_lean_embed.XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$build/train" copy --layers 1 --d-model 16 --heads 2 --seq-len 16 --steps 5 --eval-every 0 --threads 2 \
  --checkpoint "$dir/copy.st" >/dev/null
want=$(ENG_CPU=avx2 "$build/embed" "$dir/copy.st" 5,3,7,2,1 10)
got=$("$lean" "$dir/copy.st" 5,3,7,2,1 10)
[ "$got" = "$want" ] || { echo "lean embed: ids $got, the full build's $want"; exit 1; }
# The link map lists the archive members the link took.
taken=$(grep -o "^$build/libengine.a([a-z0-9_]*\.o)" "$map" | grep -E "causal_linear|avx512" || true)
[ -z "$taken" ] || { echo "lean embed: linked $taken"; exit 1; }
out=$(ENG_CPU=avx512 "$lean" "$dir/copy.st" 5 1 2>&1) && { echo "lean embed: ENG_CPU=avx512 ran"; exit 1; }
grep -qF "ENG_CPU: this program was built for avx2 at most, not avx512" <<<"$out" ||
  { echo "lean embed: ENG_CPU=avx512 refused with '$out'"; exit 1; }
size=$(stat -c %s "$lean")
echo "lean embed (softmax, ISA=avx2, static, stripped): $size bytes (budget $max), ids $got"
[ "$size" -le "$max" ] || { echo "lean embed: $size bytes, over the budget of $max"; exit 1; }
