// Linformer (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity", arXiv 2006.04768), the
// `linformer` variant. Each head projects its n keys and values along the sequence axis to k rows with learned
// matrices E_h, F_h ∈ R^{k × max_len} and attends over those k rows (Eq. 7):
//
//   out = softmax(q (E K)ᵀ / √D) (F V),   E = E_h[:, :n], F = F_h[:, :n]
//
// where q, k, v arrive already multiplied by W^Q, W^K, W^V (models/multihead.h). An input shorter than max_len
// uses the first n columns of E and F. Cost per head: O(n·k·D) time (E K, F V and the Lq × k logits),
// O(n·k + k·D) memory (the used columns of E and F, the logits, E K and F V); never n × n.
//
// Options: k = projected length (default min(256, max_len); at most max_len; k > n is allowed: the k rows are
// then k mixtures of fewer keys, exact but not cheaper); share = none | headwise | kv (default none, Eq. 7 as written):
// none gives every head its own E_h and F_h [H, k, max_len]; headwise one E and one F [k, max_len] per layer;
// kv a single E = F per layer. The paper's layerwise sharing (one E for all layers) is not built: a mechanism
// only sees its own layer. Init: every entry N(0, 1/k), the R of the paper's Theorem 2, from the config seed.
//
// Masks: key_lengths zeroes the padded rows of K and V before the projection, so they add nothing to E K or F V
// (the projected keys are mixtures, so padding cannot be hidden from the softmax in any other way). The
// projection mixes future positions into every projected key: causal masks and config.causal are refused, and
// keep, bias and ALiBi, which act on (query, key) logits that are never formed, are refused too.
#pragma once
#include <cstdint>
#include <string>

#include "models/attention/attention.h"

namespace eng {

class LinformerAttention : public Attention {
 public:
  enum class Share { None, Headwise, KV };

  explicit LinformerAttention(const AttentionConfig& config);
  std::string name() const override { return "linformer"; }

  int64_t projected_length() const { return k_; }
  Share share() const { return share_; }
  // [H, k, max_len] with share=none, else [k, max_len]; f = e with share=kv (the same tensor).
  const Tensor& e() const { return e_; }
  const Tensor& f() const { return f_; }

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 private:
  int64_t heads_, max_len_, k_;
  Share share_;
  Tensor e_, f_;
};

}  // namespace eng
