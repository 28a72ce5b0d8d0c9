// Transformer-XL (Dai et al. 2019): the segment memory (models/xl_memory.h), the relative positional encoding
// (models/relative_position.h), generation with it, its config key, and the text streams that feed segments.
#include <cmath>
#include <algorithm>

#include "datasets/text.h"
#include "engine/autograd.h"
#include "engine/error.h"
#include "models/checkpoint.h"
#include "models/transformer.h"
#include "ops/binary.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/view.h"
#include "tests/gradcheck.h"
#include "tests/temp_files.h"

using namespace eng;
using eng::test::check_parameter_gradients;
using eng::test::max_abs_diff;

namespace {

TransformerConfig xl_config(int64_t layers, PositionalKind pos = PositionalKind::Relative, bool pre_norm = true) {
  TransformerConfig c;
  c.vocab = 7;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.decoder_layers = layers;
  c.max_len = 32;
  c.positional = pos;
  c.pre_norm = pre_norm;
  c.mem_len = 16;
  return c;
}

Tensor ids(std::vector<double> v, Shape s) { return from_vector(v, s, DType::I64); }

// Tokens [B, L] drawn from a seeded generator.
Tensor random_ids(int64_t B, int64_t L, int64_t vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> v;
  for (int64_t i = 0; i < B * L; ++i) v.push_back(double(rng.below(uint32_t(vocab))));
  return ids(v, {B, L});
}

Tensor rows(const Tensor& x, int64_t start, int64_t length) { return narrow(x, 1, start, length); }

// The position term by its definition: (q_i + v)·W_{k,R} R_{i+off-j} / sqrt(Dh), R from the absolute sinusoid
// table evaluated at the distance as a position.
Tensor naive_position_bias(const RelativePosition& rel, const Tensor& q, int64_t Lk, int64_t off) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), Dh = q.size(3), d = H * Dh;
  Tensor out = zeros({B, H, Lq, Lk}, DType::F64);
  for (int64_t i = 0; i < Lq; ++i)
    for (int64_t j = 0; j < Lk; ++j) {
      const Tensor r = sinusoidal_table(1, d, i + off - j, DType::F64);  // [1, d]
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          double s = 0;
          for (int64_t e = 0; e < Dh; ++e) {
            double wr = 0;
            for (int64_t f = 0; f < d; ++f) wr += rel.r_proj.weight.at({h * Dh + e, f}) * r.at({0, f});
            s += (q.at({b, h, i, e}) + rel.v.at({h, e})) * wr;
          }
          out.set_at({b, h, i, j}, s / std::sqrt(double(Dh)));
        }
    }
  return out;
}

}  // namespace

TEST_CASE("transformer-xl: segment 2 with the memory of segment 1 equals one forward over both") {
  for (int64_t layers : {1, 2})
    for (bool pre : {true, false})
      for (PositionalKind pos : {PositionalKind::Relative, PositionalKind::Rotary, PositionalKind::Alibi}) {
        CAPTURE(layers);
        CAPTURE(pre);
        CAPTURE(positional_name(pos));
        LanguageModel m(xl_config(layers, pos, pre));
        m.to(DType::F64);
        m.eval();
        NoGradGuard no_grad;
        const Tensor s1 = random_ids(2, 5, 7, 1), s2 = random_ids(2, 4, 7, 2), s3 = random_ids(2, 3, 7, 3);
        const Tensor whole = m.forward(concat({s1, s2, s3}, 1));
        XLMemory mem = m.new_memory();
        CHECK(mem.mem_len == 16);
        // mem_len 16 >= 5 + 4: segment 3 still sees all of segments 1 and 2.
        CHECK(max_abs_diff(m.forward(s1, mem), rows(whole, 0, 5)) < 1e-12);  // empty memory: the plain forward
        CHECK(mem.length() == 5);
        CHECK(max_abs_diff(m.forward(s2, mem), rows(whole, 5, 4)) < 1e-12);
        CHECK(mem.length() == 9);
        CHECK(max_abs_diff(m.forward(s3, mem), rows(whole, 9, 3)) < 1e-12);
        CHECK(mem.length() == 12);
      }
}

TEST_CASE("transformer-xl: the naive softmax path and grouped-query heads give the same results") {
  for (int64_t kv_heads : {0, 1}) {
    TransformerConfig c = xl_config(2);
    c.kv_heads = kv_heads;
    c.attention_options.set("impl", "naive");
    LanguageModel m(c);
    m.to(DType::F64);
    m.eval();
    NoGradGuard no_grad;
    const Tensor s1 = random_ids(1, 6, 7, 4), s2 = random_ids(1, 6, 7, 5);
    const Tensor whole = m.forward(concat({s1, s2}, 1));
    XLMemory mem = m.new_memory();
    mem.mem_len = 6;  // exactly one segment
    m.forward(s1, mem);
    CHECK(max_abs_diff(m.forward(s2, mem), rows(whole, 6, 6)) < 1e-12);
  }
  // Past one 64 x 64 tile of the flash kernel, which reads the shifted bias view through its strides.
  TransformerConfig c = xl_config(1);
  c.max_len = 80;
  LanguageModel flash(c);
  c.attention_options.set("impl", "naive");
  LanguageModel naive(c);
  flash.to(DType::F64);
  naive.to(DType::F64);
  NoGradGuard no_grad;
  const Tensor s1 = random_ids(1, 70, 7, 31), s2 = random_ids(1, 70, 7, 32);
  XLMemory a = flash.new_memory(), b = naive.new_memory();
  a.mem_len = b.mem_len = 70;
  CHECK(max_abs_diff(flash.forward(s1, a), naive.forward(s1, b)) < 1e-12);
  CHECK(max_abs_diff(flash.forward(s2, a), naive.forward(s2, b)) < 1e-12);
}

TEST_CASE("transformer-xl: mem_len below the segment keeps the last mem_len inputs of each layer") {
  LanguageModel m(xl_config(2));
  m.to(DType::F64);
  m.eval();
  NoGradGuard no_grad;
  const Tensor s1 = random_ids(2, 5, 7, 6), s2 = random_ids(2, 5, 7, 7);
  XLMemory mem = m.new_memory();
  mem.mem_len = 3;
  m.forward(s1, mem);
  REQUIRE(mem.layers.size() == 2);
  AttentionMask causal;
  causal.causal = true;
  const Tensor x0 = m.embed.forward(s1);
  const Tensor x1 = m.layers[0]->forward(x0, causal);
  CHECK(mem.length() == 3);
  CHECK(max_abs_diff(mem.layers[0], rows(x0, 2, 3)) == 0);
  CHECK(max_abs_diff(mem.layers[1], rows(x1, 2, 3)) < 1e-12);
  m.forward(s2, mem);
  CHECK(mem.length() == 3);
  CHECK(max_abs_diff(mem.layers[0], rows(m.embed.forward(s2), 2, 3)) == 0);

  // One layer: its memory is the embeddings of the last 3 tokens, context-free, so segment 2 sees exactly what
  // a forward over (those 3 tokens, segment 2) sees.
  LanguageModel one(xl_config(1));
  one.to(DType::F64);
  one.eval();
  XLMemory m1 = one.new_memory();
  m1.mem_len = 3;
  one.forward(s1, m1);
  const Tensor want = rows(one.forward(concat({rows(s1, 2, 3), s2}, 1)), 3, 5);
  CHECK(max_abs_diff(one.forward(s2, m1), want) < 1e-12);

  // mem_len 0: nothing is kept and every segment is the plain forward.
  XLMemory none = one.new_memory();
  none.mem_len = 0;
  one.forward(s1, none);
  CHECK(none.length() == 0);
  CHECK(max_abs_diff(one.forward(s2, none), one.forward(s2)) == 0);
}

TEST_CASE("transformer-xl: the memory is detached and no gradient reaches the previous segment") {
  LanguageModel m(xl_config(2));
  m.to(DType::F64);
  m.eval();
  const Tensor s1 = random_ids(2, 4, 7, 8), s2 = random_ids(2, 4, 7, 9);
  const Tensor w = eng::test::uniform({2, 4, 7}, 10);
  auto grads_of_segment2 = [&](bool grad_in_segment1) {
    XLMemory mem = m.new_memory();
    if (grad_in_segment1) {
      m.forward(s1, mem);
    } else {
      NoGradGuard off;
      m.forward(s1, mem);
    }
    for (const Tensor& t : mem.layers) {
      CHECK_FALSE(t.requires_grad());
      CHECK(t.grad_fn() == nullptr);
    }
    m.zero_grad();
    sum(mul(m.forward(s2, mem), w)).backward();
    std::vector<Tensor> g;
    for (const auto& [name, p] : m.named_parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    return g;
  };
  const auto with_graph = grads_of_segment2(true), constant = grads_of_segment2(false);
  REQUIRE(with_graph.size() == constant.size());
  for (size_t i = 0; i < with_graph.size(); ++i) {
    REQUIRE(with_graph[i].defined());
    CHECK(max_abs_diff(with_graph[i], constant[i]) == 0);
  }
}

TEST_CASE("relative positions: the bias equals (q_i + v)·W_{k,R} R_{i-j} / sqrt(Dh) by hand, both projection orders") {
  Rng rng(11);
  RelativePosition rel(8, 2, rng);
  rel.to(DType::F64);
  // (B, Lq, Lk, offset): B·Lq rows against Lq + Lk table rows decides which side W_{k,R} projects.
  struct Case {
    int64_t B, Lq, Lk, off;
  };
  for (Case c : {Case{2, 4, 7, 3}, Case{1, 1, 6, 5}, Case{1, 3, 5, 0}, Case{3, 5, 5, 0}}) {
    CAPTURE(c.Lq);
    CAPTURE(c.Lk);
    const Tensor q = eng::test::uniform({c.B, 2, c.Lq, 4}, uint64_t(c.Lq * 10 + c.Lk));
    const Tensor bias = rel.position_bias(q, c.Lk, c.off);
    REQUIRE(bias.shape() == Shape{c.B, 2, c.Lq, c.Lk});
    CHECK(max_abs_diff(bias, naive_position_bias(rel, q, c.Lk, c.off)) < 1e-12);
  }
  // Shift invariance of the logits: moving every query and the keys by the same amount changes nothing.
  const Tensor q = eng::test::uniform({1, 2, 3, 4}, 12);
  const Tensor near = rel.position_bias(q, 4, 1), far = rel.position_bias(q, 9, 6);
  CHECK(max_abs_diff(near, narrow(far, 3, 5, 4)) < 1e-12);
  CHECK(max_abs_diff(near, narrow(far, 3, 4, 4)) > 1e-3);  // and the term does depend on the distance
  CHECK_THROWS_WITH(rel.position_bias(eng::test::uniform({1, 3, 2, 4}, 1), 4, 0),
                    "relative position: queries must be [B, 2, Lq, 4], got [1, 3, 2, 4]");
}

TEST_CASE("relative positions: gradients of r_proj, u, v and every parameter equal finite differences") {
  Rng rng(13);
  RelativePosition rel(8, 2, rng);
  rel.to(DType::F64);
  const Tensor q = eng::test::uniform({2, 2, 3, 4}, 14), q1 = eng::test::uniform({1, 2, 1, 4}, 15);
  check_parameter_gradients(rel.named_parameters(),
                            [&] { return add(rel.position_bias(q, 5, 2), mul_scalar(sum(rel.content_queries(q)), 0.1)); });
  check_parameter_gradients(rel.named_parameters(),
                            [&] { return add(rel.position_bias(q1, 6, 5), sum(rel.content_queries(q1))); });

  // The whole model over a segment with a memory (the memory a constant), in both projection orders.
  TransformerConfig c = xl_config(1);
  c.vocab = 5;
  c.d_model = 4;
  c.d_ff = 6;
  LanguageModel m(c);
  m.to(DType::F64);
  const Tensor s1 = random_ids(2, 3, 5, 16);
  for (const Tensor& s2 : {random_ids(2, 4, 5, 17), random_ids(1, 1, 5, 18)}) {
    XLMemory mem = m.new_memory();
    {
      NoGradGuard no_grad;
      m.forward(narrow(s1, 0, 0, s2.size(0)), mem);
    }
    const XLMemory fixed = mem;
    check_parameter_gradients(m.named_parameters(), [&] {
      XLMemory copy = fixed;
      return m.forward(s2, copy);
    }, {1e-6, 1e-6, 1e-5});
  }
}

TEST_CASE("relative positions: a periodic input gives periodic outputs under a sliding window") {
  // Each query sees its last 3 keys (a keep band): with logits that depend on i - j only, a period-3 input
  // gives a period-3 output, queries in the segment and keys reaching into the memory alike.
  MultiHeadConfig c;
  c.d_model = 8;
  c.heads = 2;
  c.causal = true;
  c.positional = PositionalKind::Relative;
  Rng rng(19);
  MultiHeadAttention mha(c, rng);
  mha.to(DType::F64);
  const Tensor period = eng::test::uniform({1, 3, 8}, 20);
  const Tensor all = concat({period, period, period, period}, 1);  // memory of 5 positions + a segment of 7
  const int64_t M = 5, L = 7;
  AttentionMask mask;
  mask.causal = true;
  mask.query_offset = M;
  Tensor keep = zeros({1, 1, L, M + L}, DType::I64);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = M + i - 2; j <= M + i; ++j) keep.set_at({0, 0, i, j}, 1);
  mask.keep = keep;
  NoGradGuard no_grad;
  const Tensor out = mha.forward(rows(all, M, L), all, mask);
  for (int64_t i = 0; i + 3 < L; ++i) CHECK(max_abs_diff(rows(out, i, 1), rows(out, i + 3, 1)) < 1e-12);
  CHECK(max_abs_diff(rows(out, 0, 1), rows(out, 1, 1)) > 1e-3);
}

TEST_CASE("relative positions: step() with the KV cache equals the parallel form") {
  for (int64_t kv_heads : {0, 1})
    for (bool pre : {true, false}) {
      CAPTURE(kv_heads);
      CAPTURE(pre);
      TransformerConfig c = xl_config(2, PositionalKind::Relative, pre);
      c.kv_heads = kv_heads;
      LanguageModel m(c);
      m.to(DType::F64);
      m.eval();
      NoGradGuard no_grad;
      const Tensor x = random_ids(2, 9, 7, 21);
      const Tensor full = m.forward(x);
      auto st = m.new_state();
      for (int64_t t = 0; t < 9; ++t) {
        const Tensor lt = m.step(squeeze(narrow(x, 1, t, 1), 1), st);
        CHECK(max_abs_diff(lt, squeeze(narrow(full, 1, t, 1), 1)) < 1e-12);
      }
    }
}

TEST_CASE("relative positions: a variant that does not take mask.bias is refused by the layer, naming it") {
  MultiHeadConfig c;
  c.attention = "linear";
  c.positional = PositionalKind::Relative;
  Rng rng(25);
  CHECK_THROWS_WITH(MultiHeadAttention(c, rng),
                    "MultiHeadAttention: positional 'relative' adds its position term to the logits as mask.bias, "
                    "which attention 'linear' does not take");
}

TEST_CASE("transformer-xl: config key mem_len and positional 'relative' survive to_map and a checkpoint") {
  TransformerConfig c = xl_config(2);
  c.mem_len = 12;
  const auto kv = c.to_map();
  CHECK(kv.at("mem_len") == "12");
  CHECK(kv.at("positional") == "relative");
  const TransformerConfig back = TransformerConfig::from_map(kv);
  CHECK(back.mem_len == 12);
  CHECK(back.positional == PositionalKind::Relative);
  CHECK(xl_config(1, PositionalKind::Rotary).to_map().count("mem_len") == 1);
  TransformerConfig off = xl_config(1, PositionalKind::Sinusoidal);
  off.mem_len = 0;
  CHECK(off.to_map().count("mem_len") == 0);  // recorded only when on: old checkpoints load as mem_len = 0

  LanguageModel saved(c);
  auto names = saved.named_parameters();
  CHECK(std::any_of(names.begin(), names.end(),
                    [](const auto& p) { return p.first == "layers1.self_attn.relative.r_proj.weight"; }));
  CHECK(std::any_of(names.begin(), names.end(), [](const auto& p) { return p.first == "layers0.self_attn.relative.u"; }));
  eng::test::TempDir dir;
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : kv) meta["config." + key] = value;
  save_checkpoint(dir.file("xl.safetensors"), saved, nullptr, meta);
  TransformerConfig reseeded = back;
  reseeded.seed = 99;  // other initial weights: only the load can make the logits equal
  LanguageModel loaded(reseeded);
  const auto loaded_meta = load_checkpoint(dir.file("xl.safetensors"), loaded, nullptr);
  std::map<std::string, std::string> cfg;
  for (const auto& [key, value] : loaded_meta)
    if (key.rfind("config.", 0) == 0) cfg[key.substr(7)] = value;
  const TransformerConfig restored = TransformerConfig::from_map(cfg);
  CHECK(restored.mem_len == 12);
  CHECK(restored.positional == PositionalKind::Relative);
  NoGradGuard no_grad;
  const Tensor x = random_ids(1, 5, 7, 26);
  XLMemory a = saved.new_memory(), b = loaded.new_memory();
  saved.forward(x, a);
  loaded.forward(x, b);
  CHECK(max_abs_diff(saved.forward(x, a), loaded.forward(x, b)) == 0);
  auto without = kv;
  without.erase("mem_len");
  CHECK_THROWS_WITH(check_checkpoint_config("xl.safetensors", loaded_meta, without),
                    "checkpoint xl.safetensors is for a different model: mem_len = 12 in the checkpoint, not set in "
                    "the requested model");
}

TEST_CASE("transformer-xl: what mem_len refuses") {
  TransformerConfig c = xl_config(1, PositionalKind::Sinusoidal);
  CHECK_THROWS_WITH(c.validate(), "config: mem_len 16 (Transformer-XL memory) needs a decoder-only model "
                                  "(encoder_layers 0), no reversible layers and positions not added to the "
                                  "embeddings (positional sinusoidal; relative, rotary, alibi or none)");
  c = xl_config(1);
  c.reversible = true;
  CHECK_THROWS(c.validate());
  c = xl_config(1);
  c.encoder_layers = 1;
  CHECK_THROWS(c.validate());
  c = xl_config(1);
  c.mem_len = -1;
  CHECK_THROWS_WITH(c.validate(), "config: mem_len must be >= 0, got -1");

  TransformerConfig plain = xl_config(1, PositionalKind::Learned);
  plain.mem_len = 0;
  LanguageModel m(plain);
  XLMemory mem = m.new_memory();
  mem.mem_len = 4;
  CHECK_THROWS_WITH(m.forward(random_ids(1, 3, 7, 27), mem),
                    "LanguageModel: a Transformer-XL memory needs positions that are not added to the embeddings "
                    "(relative, rotary, alibi or none), got 'learned'");
  LanguageModel enc(xl_config(1), false);
  XLMemory e = enc.new_memory();
  CHECK_THROWS_WITH(enc.forward(random_ids(1, 3, 7, 28), e), "LanguageModel: a Transformer-XL memory needs a causal model");
  LanguageModel two(xl_config(2));
  XLMemory mt = two.new_memory();
  two.forward(random_ids(2, 3, 7, 29), mt);
  CHECK_THROWS_WITH(two.forward(random_ids(1, 3, 7, 30), mt),
                    "LanguageModel: the memory holds 2 layers of batch 2, the model has 2 layers and the ids batch 1");
}

TEST_CASE("text streams: B contiguous streams read segment after segment (Transformer-XL's ordered loader)") {
  eng::test::TempDir dir;
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 % 251);
  eng::test::write_file(dir.file("t.txt"), bytes);
  TextCorpus c(dir.file("t.txt"));
  // The train split holds 900 bytes: 4 streams of 225, segments of 10 predict up to byte 224 of a stream.
  CHECK(c.num_stream_segments(TextSplit::Train, 4, 10) == 22);  // (225 - 1) / 10
  for (int64_t t : {0, 1, 21}) {
    const LMBatch b = c.stream_segment(TextSplit::Train, 4, 10, t);
    REQUIRE(b.inputs.shape() == Shape{4, 10});
    for (int64_t s = 0; s < 4; ++s)
      for (int64_t i = 0; i < 10; ++i) {
        const size_t at = size_t(s * 225 + t * 10 + i);
        CHECK(b.inputs.at({s, i}) == bytes[at]);
        CHECK(b.targets.at({s, i}) == bytes[at + 1]);
      }
  }
  // Consecutive segments join: the last target of segment t is the first input of segment t + 1.
  const LMBatch a = c.stream_segment(TextSplit::Valid, 2, 6, 0), b = c.stream_segment(TextSplit::Valid, 2, 6, 1);
  for (int64_t s = 0; s < 2; ++s) {
    CHECK(a.targets.at({s, 5}) == b.inputs.at({s, 0}));
    CHECK(a.inputs.at({s, 0}) == bytes[size_t(900 + s * 25)]);  // the valid split starts at byte 900
  }
  const std::string t = "text: " + dir.file("t.txt") + ": ";
  CHECK_THROWS_WITH(c.stream_segment(TextSplit::Train, 4, 10, 22),
                    (t + "segment 22 is outside the 22 segments of 10 bytes in 4 streams of the train split").c_str());
  CHECK_THROWS_WITH(c.num_stream_segments(TextSplit::Test, 10, 5),
                    (t + "the test split holds 50 bytes, 5 per stream of 10, too few for a segment of 5 + 1").c_str());
}
