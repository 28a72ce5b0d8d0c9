# The lean embed build (`make embed`, built by make test with its default VARIANTS, softmax and causal-linear) and the
# C interface (models/c_api.h) from tests/c_api_test.c: sourced by tests/tools.sh after embed.sh, whose softmax
# checkpoint $dir/embed.st they share.
c_api_test() { "${runner[@]}" "$build/c_api_test" "$@"; }
lean_embed() { "${runner[@]}" "$build/embed-lean/embed" "$@"; }
want=$(embed "$dir/embed.st" 5,3,7,2,1 10 2>&1)
out=$(c_api_test "$dir/embed.st" 5,3,7,2,1 10 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$out" = "$want" ]
check "C API: the same ids as embed by path, buffer and eng_step; its refusals name the problem ($out)" $?
[ "$(lean_embed "$dir/embed.st" 5,3,7,2,1 10 2>&1)" = "$want" ]
check "lean embed (only softmax and causal-linear linked): the same ids as the full build" $?
# A variant the lean build did not link is refused by name, listing the ones it has.
train copy --layers 1 --d-model 16 --heads 2 --seq-len 16 --steps 1 --eval-every 0 --threads 2 --attention linear \
  --checkpoint "$dir/linear.st" >/dev/null 2>&1; check "C API: a linear-attention checkpoint" $?
out=$(lean_embed "$dir/linear.st" 5,3 2 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "unknown variant 'linear' (known: causal-linear, softmax)" <<<"$out"
check "lean embed refuses a variant it did not link ($out)" $?
[ "$(c_api_test "$dir/linear.st" 5,3 4 2>&1)" = "$(embed "$dir/linear.st" 5,3 4 2>&1)" ]
check "C API: a linear-attention model gives embed's ids" $?
# The lean embed generates with the Generator alone (no LanguageModel::step linked): a model only the Tensor path
# runs is refused, which the full build runs.
train copy --layers 1 --d-model 16 --heads 2 --seq-len 16 --steps 1 --eval-every 0 --threads 2 --reversible \
  --checkpoint "$dir/reversible.st" >/dev/null 2>&1; check "lean embed: a reversible checkpoint" $?
out=$(lean_embed "$dir/reversible.st" 5,3 2 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "the model has reversible layers; only LanguageModel::step runs it, which this lean build" \
  <<<"$out" && embed "$dir/reversible.st" 5,3 2 >/dev/null 2>&1
check "lean embed refuses a model the Generator cannot run, which embed runs ($out)" $?
# The lean link took no file of another variant (its map lists the archive members it took; a file name shared
# with another directory, such as ops/softmax.cpp's, proves nothing and is skipped).
others=()
for f in $(grep -l "^ENG_REGISTER_ATTENTION(" models/attention/*.cpp); do
  base=$(basename "$f" .cpp)
  case $base in softmax | causal_linear | linear | stateful_softmax) continue ;; esac
  [ -n "$(find engine ops models datasets -name "$base.cpp" ! -path "$f")" ] && continue
  grep -q "^$build/libengine.a($base.o)" "$build/embed-lean/embed.map" && others+=("$base")
done
[ -f "$build/embed-lean/embed.map" ] && [ ${#others[@]} -eq 0 ]
check "lean embed links no other variant's file (${others[*]:-none})" $?
