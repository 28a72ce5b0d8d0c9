// `stateful-softmax`: the KV-cache generator equals the causal parallel form at every position, and its
// cache (unlike linear attention's state) grows with the sequence.
#include "engine/autograd.h"
#include "models/attention/softmax.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::uniform;

TEST_CASE("stateful-softmax: step == the causal parallel form at every position; the cache grows") {
  auto attn = make_attention("stateful-softmax", AttentionConfig{});
  CHECK(attn->name() == "stateful-softmax");
  const int64_t N = 40;
  Tensor q = uniform({2, 2, N, 4}, 1), k = uniform({2, 2, N, 4}, 2), v = uniform({2, 2, N, 3}, 3);
  AttentionMask causal;
  causal.causal = true;
  Tensor want = attn->forward(q, k, v, causal);
  auto st = attn->new_state();
  for (int64_t t = 0; t < N; ++t) {
    Tensor y = attn->step(narrow(q, 2, t, 1), narrow(k, 2, t, 1), narrow(v, 2, t, 1), *st, AttentionMask{});
    CHECK(eng::test::max_abs_diff(y, narrow(want, 2, t, 1)) < 1e-12);
    st->length++;
  }
  auto* cache = dynamic_cast<KVCacheState*>(st.get());
  REQUIRE(cache != nullptr);
  CHECK(cache->stored == N);
  CHECK(cache->capacity() >= N);
}
