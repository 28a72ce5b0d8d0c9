// Multi-query and grouped-query attention (MultiHeadConfig::kv_heads, models/multihead.h): the degenerate
// equivalences with multi-head attention, generation and cross-attention memory, gradients of the
// parameters, the config key in checkpoints, and the errors.
#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>

#include "engine/error.h"
#include "models/attention/softmax.h"
#include "models/checkpoint.h"
#include "models/multihead.h"
#include "models/transformer.h"
#include "ops/view.h"
#include "tests/gradcheck.h"

using namespace eng;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;
using eng::test::uniform;

namespace {

MultiHeadConfig gqa_config(int64_t kv_heads, const std::string& attention = "softmax") {
  MultiHeadConfig c;
  c.d_model = 8;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.attention = attention;
  c.max_len = 16;
  return c;
}

Tensor param(const Module& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters())
    if (n == name) return p;
  FAIL("no parameter " << name);
  return {};
}

// Copies every parameter and buffer of `gqa` into `mha` (built with kv_heads = heads), repeating the rows
// of K/V group g = h / (H / G) for each query head h: the MHA layer that GQA is by definition.
void tile_into(const MultiHeadAttention& gqa, const MultiHeadAttention& mha, int64_t heads, int64_t groups,
               int64_t head_dim) {
  for (const auto& [name, p] : mha.named_parameters()) {
    const Tensor src = param(gqa, name);
    if (name.rfind("k_proj.", 0) != 0 && name.rfind("v_proj.", 0) != 0) {
      p.copy_from(src);
      continue;
    }
    for (int64_t h = 0; h < heads; ++h)
      narrow(p, 0, h * head_dim, head_dim).copy_from(narrow(src, 0, h / (heads / groups) * head_dim, head_dim));
  }
  auto gb = gqa.named_buffers();
  auto mb = mha.named_buffers();
  REQUIRE(gb.size() == mb.size());
  for (size_t i = 0; i < gb.size(); ++i) mb[i].second.copy_from(gb[i].second);
}

AttentionMask causal_mask() {
  AttentionMask m;
  m.causal = true;
  return m;
}

std::string temp_path(const char* name) { return "/tmp/eng_test_gqa_" + std::to_string(getpid()) + "_" + name; }

}  // namespace

TEST_CASE("grouped-query: kv_heads = heads is multi-head attention, bitwise (same draws, same parameters)") {
  Rng r0(3), r1(3);
  MultiHeadAttention mha(gqa_config(0), r0), same(gqa_config(4), r1);
  CHECK(param(same, "k_proj.weight").shape() == Shape{8, 8});
  const Tensor x = uniform({2, 5, 8}, 1).to(DType::F32);
  CHECK(max_abs_diff(mha.forward(x, x, causal_mask()), same.forward(x, x, causal_mask())) == 0);
}

TEST_CASE("grouped-query: a GQA layer == the MHA layer with its K/V weights repeated per group (exact)") {
  for (int64_t groups : {1, 2}) {  // 1: multi-query, which is GQA with one group
    for (PositionalKind pos : {PositionalKind::None, PositionalKind::Rotary, PositionalKind::Alibi}) {
      for (const char* impl : {"auto", "naive"}) {
        CAPTURE(groups);
        CAPTURE(impl);
        MultiHeadConfig gc = gqa_config(groups), mc = gqa_config(0);
        gc.positional = mc.positional = pos;
        gc.causal = mc.causal = true;
        gc.options.set("impl", impl);
        mc.options.set("impl", impl);
        Rng r0(5), r1(6);
        MultiHeadAttention gqa(gc, r0), mha(mc, r1);
        gqa.to(DType::F64);
        mha.to(DType::F64);
        CHECK(param(gqa, "k_proj.weight").shape() == Shape{groups * 2, 8});
        CHECK(param(gqa, "v_proj.bias").shape() == Shape{groups * 2});
        tile_into(gqa, mha, 4, groups, 2);
        const Tensor x = uniform({2, 6, 8}, 7), mem = uniform({2, 5, 8}, 8);
        CHECK(max_abs_diff(gqa.forward(x, x, causal_mask()), mha.forward(x, x, causal_mask())) == 0);
        AttentionMask pad;
        pad.key_lengths = {5, 2};
        CHECK(max_abs_diff(gqa.forward(x, mem, pad), mha.forward(x, mem, pad)) == 0);
      }
    }
  }
}

TEST_CASE("grouped-query: multi-query K/V are one head viewed H times (stride 0), GQA's are copies of groups") {
  Rng rng(9);
  MultiHeadAttention mqa(gqa_config(1), rng), gqa(gqa_config(2), rng);
  const Tensor mem = uniform({2, 5, 8}, 10).to(DType::F32);
  const KVMemory m1 = mqa.project_memory(mem, {});
  CHECK(m1.k.shape() == Shape{2, 4, 5, 2});
  CHECK(m1.k.strides()[1] == 0);  // no copy: every query head reads the same storage
  CHECK(m1.v.strides()[1] == 0);
  const KVMemory m2 = gqa.project_memory(mem, {});
  CHECK(m2.k.shape() == Shape{2, 4, 5, 2});
  CHECK(max_abs_diff(narrow(m2.k, 1, 0, 1), narrow(m2.k, 1, 1, 1)) == 0);  // heads 0, 1: group 0
  CHECK(max_abs_diff(narrow(m2.v, 1, 2, 1), narrow(m2.v, 1, 3, 1)) == 0);  // heads 2, 3: group 1
  CHECK(max_abs_diff(narrow(m2.k, 1, 0, 1), narrow(m2.k, 1, 2, 1)) > 0);
}

TEST_CASE("grouped-query: step() == the causal parallel form; cross-attention memory == forward") {
  for (int64_t groups : {1, 2}) {
    for (const char* attention : {"softmax", "linear"}) {
      CAPTURE(groups);
      CAPTURE(attention);
      MultiHeadConfig c = gqa_config(groups, attention);
      c.causal = true;
      c.positional = PositionalKind::Rotary;
      Rng rng(12);
      MultiHeadAttention a(c, rng);
      a.to(DType::F64);
      const Tensor x = uniform({2, 5, 8}, 13);
      const Tensor full = a.forward(x, x, causal_mask());
      auto state = a.new_state();
      for (int64_t t = 0; t < 5; ++t)
        CHECK(max_abs_diff(a.step(narrow(x, 1, t, 1), *state), narrow(full, 1, t, 1)) < 1e-12);
      // softmax's KV cache holds the K/V groups, not the query heads: G/H of a multi-head cache.
      if (auto* cache = dynamic_cast<KVCacheState*>(state.get())) CHECK(cache->k.size(1) == groups);
      CHECK((dynamic_cast<KVCacheState*>(state.get()) != nullptr) == (std::string(attention) == "softmax"));
      const Tensor mem = uniform({2, 4, 8}, 14);
      MultiHeadConfig cc = gqa_config(groups, attention);
      MultiHeadAttention cross(cc, rng);
      cross.to(DType::F64);
      AttentionMask pad;
      pad.key_lengths = {4, 3};
      const KVMemory kv = cross.project_memory(mem, pad.key_lengths);
      CHECK(max_abs_diff(cross.attend_memory(x, kv), cross.forward(x, mem, pad)) < 1e-12);
    }
  }
}

TEST_CASE("grouped-query: finite-difference gradients of every parameter (G = 2, H = 4), self and cross") {
  Rng rng(15);
  MultiHeadConfig c = gqa_config(2);
  c.causal = true;
  c.positional = PositionalKind::Rotary;
  MultiHeadAttention a(c, rng);
  a.to(DType::F64);
  const Tensor x = uniform({2, 3, 8}, 16), mem = uniform({2, 4, 8}, 17);
  check_parameter_gradients(a.named_parameters(), [&] { return a.forward(x, x, causal_mask()); });
  AttentionMask pad;
  pad.key_lengths = {4, 2};
  check_parameter_gradients(a.named_parameters(), [&] { return a.forward(x, mem, pad); });
}

TEST_CASE("grouped-query: config key kv_heads in to_map/from_map and a checkpoint round trip") {
  TransformerConfig c;
  c.vocab = 6;
  c.d_model = 8;
  c.heads = 4;
  c.kv_heads = 2;
  c.d_ff = 8;
  c.decoder_layers = 1;
  c.max_len = 8;
  auto m = c.to_map();
  CHECK(m.at("kv_heads") == "2");
  CHECK(TransformerConfig::from_map(m).kv_heads == 2);
  m.erase("kv_heads");  // a checkpoint written before the key existed: plain multi-head attention
  CHECK(TransformerConfig::from_map(m).kv_heads == 0);
  TransformerConfig plain = c;
  plain.kv_heads = 4;
  CHECK(plain.to_map().count("kv_heads") == 0);  // kv_heads = heads is MHA: the keys MHA always had
  plain.kv_heads = 0;
  CHECK(plain.to_map().count("kv_heads") == 0);

  const std::string path = temp_path("ckpt.safetensors");
  LanguageModel saved(c);
  CHECK(param(saved, "layers0.self_attn.k_proj.weight").shape() == Shape{4, 8});
  save_checkpoint(path, saved, nullptr, {});
  c.seed = 2;
  LanguageModel loaded(c);
  load_checkpoint(path, loaded, nullptr);
  Tensor ids = from_vector(std::vector<double>{1, 2, 3, 4, 0, 5}, {2, 3}, DType::I64);
  CHECK(max_abs_diff(saved.forward(ids), loaded.forward(ids)) == 0);
  LanguageModel mha(plain);
  CHECK_THROWS(load_checkpoint(path, mha, nullptr));  // k_proj [8, 8] vs the file's [4, 8]
  std::remove(path.c_str());

  // generation with the cache equals the parallel logits
  auto state = loaded.new_state();
  const Tensor logits = loaded.forward(ids);
  for (int64_t t = 0; t < 3; ++t) {
    const Tensor row = squeeze(narrow(logits, 1, t, 1), 1);
    CHECK(max_abs_diff(loaded.step(squeeze(narrow(ids, 1, t, 1), 1), state), row) < 1e-5);
  }
}

TEST_CASE("grouped-query: kv_heads that does not divide heads is refused by validate() and the layer") {
  TransformerConfig c;
  c.d_model = 8;
  c.heads = 4;
  c.kv_heads = 3;
  CHECK_THROWS_WITH(c.validate(), "config: kv_heads 3 must divide heads 4 (0 = heads, 1 = multi-query)");
  c.kv_heads = 8;
  CHECK_THROWS_WITH(c.validate(), "config: kv_heads 8 must divide heads 4 (0 = heads, 1 = multi-query)");
  c.kv_heads = -1;
  CHECK_THROWS_WITH(c.validate(), "config: kv_heads -1 must divide heads 4 (0 = heads, 1 = multi-query)");
  Rng rng(1);
  CHECK_THROWS_WITH(MultiHeadAttention(gqa_config(3), rng),
                    "MultiHeadAttention: kv_heads 3 must divide heads 4 (0 = heads, 1 = multi-query)");
}
