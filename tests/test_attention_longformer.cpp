// `longformer`: == softmax attention under the dense mask "global, or the window of the head: a band on the
// first heads, a dilated window on the last dilated_heads".
#include <doctest/doctest.h>

#include <cstdlib>

#include "models/transformer.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"
#include "tests/sparse_check.h"

using namespace eng;
using namespace eng::test;

TEST_CASE("longformer == softmax attention with the dense per-head mask, causal and not") {
  for (bool causal : {false, true})
    for (int64_t block : {8, 64}) {
      const int64_t n = block == 8 ? 37 : 150, H = 3, w = 3, g = 2, d = 4, dh = 1;
      check_sparse_pattern({"longformer",
                            {{"block", std::to_string(block)},
                             {"window", "3"},
                             {"globals", "2"},
                             {"dilated_heads", "1"},
                             {"dilation", "4"}},
                            H,
                            n,
                            causal},
                           [=](int64_t h, int64_t i, int64_t j) {
                             if (causal && j > i) return false;
                             if (i < g || j < g) return true;
                             const int64_t step = h >= H - dh ? d : 1;
                             return std::abs(i - j) <= w * step && (i - j) % step == 0;
                           });
    }
  // no globals, no dilated heads: the band
  check_sparse_pattern({"longformer", {{"block", "8"}, {"window", "2"}, {"globals", "0"}}, 2, 30, true},
                       [](int64_t, int64_t i, int64_t j) { return j <= i && i - j <= 2; });
}

TEST_CASE("longformer in a causal language model: trains (gradients reach every parameter) and never looks ahead") {
  TransformerConfig c;
  c.vocab = 7, c.d_model = 8, c.heads = 2, c.d_ff = 12, c.decoder_layers = 2, c.max_len = 40;
  c.attention = "longformer";
  for (const char* kv : {"window=3", "globals=1", "dilated_heads=1", "block=8"}) {
    const std::string s = kv;
    c.attention_options.set(s.substr(0, s.find('=')), s.substr(s.find('=') + 1));
  }
  LanguageModel m(c);
  std::vector<double> tokens;
  for (int i = 0; i < 2 * 30; ++i) tokens.push_back(double((i * 5 + 3) % 7));
  const Tensor x = from_vector(tokens, {2, 30}, DType::I64);
  const Tensor y = m.forward(x);
  sum(y).backward();
  for (const auto& p : m.named_parameters()) CHECK_MESSAGE(p.second.grad().defined(), p.first);
  tokens[29] = double((int(tokens[29]) + 1) % 7);  // the last token of the first sequence changes
  const Tensor y2 = m.forward(from_vector(tokens, {2, 30}, DType::I64));
  CHECK(max_abs_diff(narrow(y2, 1, 0, 29), narrow(y, 1, 0, 29)) == 0);
  CHECK(max_abs_diff(narrow(y2, 1, 29, 1), narrow(y, 1, 29, 1)) > 0);
}

TEST_CASE("longformer: peak memory at N = 16384 below an N x N buffer") {
  check_sparse_memory({"longformer", {{"dilated_heads", "1"}}, 2, 16384, true});
}

TEST_CASE("longformer: options and errors") {
  CHECK_THROWS_WITH(make_sparse_variant({"longformer", {{"dilated_heads", "3"}}, 2, 0, false}),
                    "attention 'longformer': option dilated_heads = 3 but the model has 2 heads");
  auto attn = make_sparse_variant({"longformer", {{"dilated_heads", "2"}}, 2, 0, false});
  const Tensor x = zeros({1, 1, 5, 4}, DType::F64);
  CHECK_THROWS_WITH(attn->forward(x, x, x, {}),
                    "attention 'longformer': option dilated_heads = 2 but the input has 1 heads");
  CHECK_THROWS_WITH(make_sparse_variant({"longformer", {{"dilation", "0"}}, 2, 0, false}),
                    "attention 'longformer': option dilation expects an integer >= 1, got '0'");
}
