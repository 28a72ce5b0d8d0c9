// Gaussian locality prior (Yang, Tu, Wong, Meng, Chao, Zhang 2018, "Modeling Localness for Self-Attention
// Networks", arXiv 1810.10182; the "prior attention" family of the efficient-transformer surveys), the
// `gaussian-prior` variant: softmax attention whose logits get a Gaussian bias centred on the query's position,
//
//   out = softmax(q kᵀ · scale + G + mask) v,     G_ij = −(i + query_offset − j)² / (2 σ_h²)
//
// (the paper's Gaussian bias G_ij = −(j − P_i)² / (2σ_i²) added to the energies before the softmax). Yang et
// al. predict the centre P_i and the window σ_i = D_i / 2 from each query; here the centre is the query's own
// position and σ_h is one learned scalar per head, parameterised as log σ_h so it stays positive (no learned
// centre shift: keeping the centre at i keeps the prior symmetric and the causal form unchanged). G is handed
// to ops/attention_naive.h as mask.bias (added to any bias the caller gives), so the gradient reaches log σ_h
// by autograd.
//
// Cost: full attention, O(H·Lq·Lk·D) time and O(H·Lq·Lk) memory (logits and the bias G are materialised).
// Masks: all of naive attention's (causal, key padding, keep, bias, ALiBi). σ → ∞ gives softmax attention.
// Options: sigma = the initial σ of every head, in positions (default 8, > 0); scale = the logit scale
// (default 1/√D).
//
// Recurrent form: a KV cache (softmax.h's kv_cache_step). Row t of G depends on t and j only, so step t adds
// −(t − j)² / (2σ_h²) to the new query's logits over the cached keys 0 .. t: O(H·t·D) per step, O(G·t·D) memory for
// G K/V groups, as softmax's cache.
#pragma once
#include <memory>
#include <string>

#include "models/attention/attention.h"

namespace eng {

// G [1, H, Lq, Lk] for log σ [H] (differentiable wrt log_sigma), queries at positions query_offset + i.
Tensor gaussian_prior_bias(const Tensor& log_sigma, int64_t Lq, int64_t Lk, int64_t query_offset);

class GaussianPriorAttention : public Attention {
 public:
  explicit GaussianPriorAttention(const AttentionConfig& config);
  std::string name() const override { return "gaussian-prior"; }
  std::unique_ptr<AttentionState> new_state() const override;
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;
  Tensor attend_step(const Tensor& q, const Tensor& k, const Tensor& v, AttentionState& state,
                     const AttentionMask& mask) override;

  const Tensor& log_sigma() const { return log_sigma_; }  // [H]

 private:
  int64_t heads_;
  double scale_ = 0;  // 0: 1/sqrt(D)
  Tensor log_sigma_;
};

}  // namespace eng
