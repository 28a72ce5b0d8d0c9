// `sparse-strided` attention (Child et al. 2019, §4.2, the strided pattern; Lin et al. 2021 §4.1.1), for data
// with a period (images, audio) of `stride` l:
//   A1(i) = {j : i - l <= j <= i}            the previous l positions (a band of l looking back)
//   A2(i) = {j : j <= i, (i - j) mod l = 0}  every l-th position before i
// That is the paper's, causal, form. The non-causal form, our extension for encoders, drops j <= i on both sides:
// |i - j| <= l and (i - j) mod l = 0. Factorised over heads or merged (models/attention/sparse_transformer.h).
// Cost O(N (l + N / l) D), O(N sqrt(N) D) at l = sqrt(N).
#include "models/attention/sparse_atoms.h"
#include "models/attention/sparse_attention.h"
#include "models/attention/sparse_transformer.h"

namespace eng {
namespace {

std::unique_ptr<Attention> make_sparse_strided(const AttentionConfig& c) {
  const int64_t l = c.options.get_int("stride", sparse_block(c), IntRange::at_least(1));
  const bool merged = read_merged(c, "sparse-strided");
  return std::make_unique<SparseAttention>("sparse-strided", c, [l, merged](const PatternGeometry& g) {
    // A2 is a dilated window wide enough to reach the whole sequence
    return factorized(g, "sparse-strided", band_pattern(g, l), dilated_pattern(g, g.n / l + 1, l), merged);
  });
}

}  // namespace

ENG_REGISTER_ATTENTION(sparse_strided, "sparse-strided", "Sparse Transformer strided attention (Child et al. 2019), per head or merged",
                       make_sparse_strided);

}  // namespace eng
