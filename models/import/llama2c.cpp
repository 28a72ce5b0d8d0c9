// llama2.c's legacy checkpoint (its export.py version 0, what run.c reads): a header of 7 int32, little-endian
//   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative: the head is a tensor of its own), seq_len
// then f32 arrays, each [out, in] row-major as PyTorch stores a Linear weight and stacked over the layers:
//   token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim], wv [L, kv_dim, dim],
//   wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim],
//   rms_final [dim], two RoPE tables [seq_len, head_size / 2] (unused), then the head [vocab, dim] when untied.
// run.c's model: RMSNorm eps 1e-5, RoPE base 10000 on interleaved pairs (2i, 2i + 1), SwiGLU w2(silu(w1 x) ⊙ w3 x).
#include <cstring>

#include "engine/error.h"
#include "engine/file_io.h"
#include "models/import/import.h"
#include "ops/view.h"

namespace eng {

ImportedModel import_llama2c(const std::string& path) {
  const InputFile in(path, "convert");
  ENG_CHECK(in.size() >= 28, "convert: ", path, ": ", in.size(), " bytes, shorter than llama2.c's 28-byte header");
  int32_t h[7];
  in.read_at(0, h, sizeof h, "the header");
  ENG_CHECK(uint32_t(h[0]) != 0x616b3432u, "convert: ", path, ": a llama2.c file of export version 1 or later "
            "(magic 'ak42'); only the legacy version 0 that run.c reads is supported");
  const char* fields[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i)
    ENG_CHECK(h[i] != 0 && (h[i] > 0 || i == 5) && h[i] > -(1 << 30), "convert: ", path, ": header field ", fields[i],
              " = ", h[i], " is not a size (not a llama2.c checkpoint?)");
  const int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv_heads = h[4], seq_len = h[6];
  const int64_t vocab = h[5] < 0 ? -int64_t(h[5]) : h[5];
  const bool shared = h[5] > 0;
  ENG_CHECK(dim % heads == 0 && heads % kv_heads == 0 && (dim / heads) % 2 == 0, "convert: ", path, ": dim ", dim,
            ", n_heads ", heads, ", n_kv_heads ", kv_heads, " do not give an even head size shared by whole groups");
  const int64_t hs = dim / heads, kv = hs * kv_heads;

  ImportedModel m;
  m.source = "llama2c";
  TransformerConfig& t = m.config;
  t.vocab = vocab;
  t.d_model = dim;
  t.heads = heads;
  t.kv_heads = kv_heads;
  t.decoder_layers = layers;
  t.d_ff = hidden;
  t.max_len = seq_len;
  t.positional = PositionalKind::Rotary;
  t.rope_pairing = RopePairing::Interleaved;
  t.rope_theta = 10000;
  t.rms_norm = true;
  t.norm_eps = 1e-5;
  t.activation = Activation::SwiGLU;
  t.bias = false;
  t.tie_embeddings = shared;
  t.embed_scale = 1;
  t.dropout = 0;
  t.validate();

  const int64_t floats = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv * dim + 3 * dim * hidden) + dim +
                         seq_len * hs + (shared ? 0 : vocab * dim);
  ENG_CHECK(in.size() == 28 + 4 * floats, "convert: ", path, ": ", in.size(), " bytes, but the header's sizes need ",
            28 + 4 * floats, " (28 + 4 x ", floats, " floats)");
  int64_t offset = 28;
  auto next = [&](const Shape& shape, const std::string& what) {
    Tensor x = empty(shape, DType::F32);
    in.read_at(offset, x.raw_data(), size_t(x.numel()) * 4, what);
    offset += x.numel() * 4;
    return x;
  };
  auto add = [&](const std::string& ours, const Tensor& x) { m.params.emplace_back(ours, x); };
  // A stacked array [L, ...]: layer i's slice goes to layers<i>.<name>.
  auto per_layer = [&](const std::string& name, const Shape& shape, const std::string& what) {
    Shape stacked{layers};
    stacked.insert(stacked.end(), shape.begin(), shape.end());
    const Tensor all = next(stacked, what);
    for (int64_t i = 0; i < layers; ++i)
      add("layers" + std::to_string(i) + "." + name, reshape(narrow(all, 0, i, 1), shape).contiguous());
  };
  add("embed.tokens.weight", next({vocab, dim}, "token_embedding_table"));
  per_layer("norm1.rms.weight", {dim}, "rms_att_weight");
  per_layer("self_attn.q_proj.weight", {dim, dim}, "wq");
  per_layer("self_attn.k_proj.weight", {kv, dim}, "wk");
  per_layer("self_attn.v_proj.weight", {kv, dim}, "wv");
  per_layer("self_attn.out_proj.weight", {dim, dim}, "wo");
  per_layer("norm2.rms.weight", {dim}, "rms_ffn_weight");
  per_layer("ffn.fc1.weight", {hidden, dim}, "w1");
  per_layer("ffn.fc2.weight", {dim, hidden}, "w2");
  per_layer("ffn.fc3.weight", {hidden, dim}, "w3");
  add("final_norm.rms.weight", next({dim}, "rms_final_weight"));
  offset += 4 * seq_len * hs;  // freq_cis_real and freq_cis_imag: run.c computes the angles itself
  if (!shared) add("head.weight", next({vocab, dim}, "wcls"));
  return m;
}

}  // namespace eng
