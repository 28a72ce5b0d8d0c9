// Nyströmformer (Xiong et al. 2021, "Nyströmformer: A Nyström-Based Algorithm for Approximating Self-Attention",
// arXiv 2102.03902), the `nystrom` variant. With m landmarks Q̃, K̃ (segment means of the queries and keys) and
// s = 1/√D, softmax attention is approximated by (Eq. 14; arXiv v3 numbering, not confirmed against the text)
//
//   F̃ = softmax(Q K̃ᵀ s) [Lq, m],  Ã = softmax(Q̃ K̃ᵀ s) [m, m],  B̃ = softmax(Q̃ Kᵀ s) [m, n]
//   out = F̃ Ã⁺ (B̃ V)
//
// with Ã⁺ from the paper's iterative Moore–Penrose method (Eq. 13, Lemma 1; same caveat):
//   Z_0 = Ãᵀ / (‖Ã‖₁ ‖Ã‖∞),  Z_{j+1} = ¼ Z_j (13I − Ã Z_j (15I − Ã Z_j (7I − Ã Z_j))),  `iters` steps,
// ‖Ã‖₁ the largest column sum and ‖Ã‖∞ the largest row sum, per batch element and head. The paper's code divides
// by the largest column sum alone, the same number since a softmax's rows sum to 1; its default takes that maximum
// over the whole batch, which would make one element's output depend on the others, so its per-head form is used.
// Everything is built from differentiable ops, so autograd gives the backward (through Z_0's norms too).
// Cost per head: O(n·m·D + m³·iters) time and O(n·m + m²·iters) memory (F̃, B̃ and the iterates kept for the
// backward); never n × n.
//
// Segments: n positions in m segments, in order; the first n mod m segments hold ⌈n/m⌉ positions and the others
// ⌊n/m⌋ (the paper's code needs m | n, where this is the same split). m is clamped to min(m, Lq, n), so that a
// segment is never empty; with m = n every landmark is one position and the method is exact up to Ã⁺.
//
// Options: landmarks = m (default 64); iters (default 6, the paper's); conv = K (default 0 = off): a learned
// depth-wise convolution of V along the sequence, one kernel of odd width K per head, zero padding (K−1)/2 on both
// sides, added to the output (the paper code's skip connection; needs Lq = n). Parameter "conv" [H, K], init
// U(−1/√K, 1/√K) (PyTorch's Conv default for fan-in K), from the config seed.
//
// Masks: key_lengths[b] = n_b: batch element b is computed on its first n_b keys only (key landmarks are means of
// the real keys, segmented as above over n_b, and B̃'s softmax runs over them), exactly as if the padding were
// cut off; m is clamped to n_b; for the conv skip, padded values count as the zero padding. Queries have no
// padding in AttentionMask, so the query landmarks average all Lq queries. Causal masks and config.causal are
// refused (every landmark mixes future positions), and so are keep, bias and ALiBi (no (query, key) logits).
#pragma once
#include <cstdint>
#include <string>

#include "models/attention/attention.h"

namespace eng {

// Z_iters ≈ a⁺ for a [..., m, m] by the iteration above (a differentiable composite of matmuls).
Tensor nystrom_pinv(const Tensor& a, int64_t iters);

class NystromAttention : public Attention {
 public:
  explicit NystromAttention(const AttentionConfig& config);
  std::string name() const override { return "nystrom"; }

  int64_t landmarks() const { return m_; }
  int64_t iters() const { return iters_; }
  const Tensor& conv_weight() const { return conv_; }  // [H, K]; undefined when conv = 0

 protected:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) override;

 private:
  Tensor approximate(const Tensor& q, const Tensor& k, const Tensor& v) const;

  int64_t heads_, m_, iters_, conv_width_;
  Tensor conv_;
};

}  // namespace eng
