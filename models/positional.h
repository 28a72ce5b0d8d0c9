// Positional encodings. Each takes an `offset` (positions already generated) so that a token decoded
// with a cache gets the encoding of its absolute position.
//   sinusoidal: Vaswani et al. 2017 §3.5, PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)
//   learned:    a [max_len, d] table; positions beyond max_len are an error
//   rotary:     ops/rope.h, applied to q and k inside the attention layer
//   alibi:      Press et al. 2022, per-head slopes; the attention kernels add -slope · |i - j| on the fly
//   relative:   Transformer-XL (Dai et al. 2019 §3.3), models/relative_position.h: a sinusoid of the distance
//               i - j, projected per layer, added to the attention logits with learned biases u and v
#pragma once
#include <cmath>
#include <string>

#include "engine/rng.h"
#include "models/module.h"

namespace eng {

enum class PositionalKind { None, Sinusoidal, Learned, Rotary, Alibi, Relative };
PositionalKind parse_positional(const std::string& name);  // none, sinusoidal, learned, rotary, alibi, relative
const char* positional_name(PositionalKind k);
// True for the encodings added to the token embeddings (sinusoidal, learned): they name absolute positions,
// which a Transformer-XL memory cannot reuse across segments (Dai et al. 2019 §3.3).
bool positional_is_absolute(PositionalKind k);

// [length, dim] table of positions offset .. offset + length - 1.
Tensor sinusoidal_table(int64_t length, int64_t dim, int64_t offset = 0, DType dtype = DType::F32);
// Its entries one at a time (models/generator.h fills its rows as positions are reached): column i of position
// pos is sin(pos · f_i) for even i, cos for odd, with f_i = 10000^(-2⌊i/2⌋ / dim) (Vaswani et al. 2017 §3.5).
double sinusoidal_frequency(int64_t i, int64_t dim);
inline double sinusoidal_entry(int64_t pos, int64_t i, double frequency) {
  const double ang = double(pos) * frequency;
  return i % 2 == 0 ? std::sin(ang) : std::cos(ang);
}

class LearnedPositional : public Module {
 public:
  LearnedPositional(int64_t max_len, int64_t dim, Rng& rng);
  Tensor forward(int64_t length, int64_t offset = 0) const;  // [length, dim]
  Tensor weight;  // [max_len, dim], N(0, 0.02)
};

// ALiBi slopes [heads]: the geometric sequence 2^(-8/n), 2^(-16/n), ... for n = heads when heads is a
// power of two; otherwise those of the nearest lower power of two followed by every other slope of the
// next one (the paper's reference implementation).
Tensor alibi_slopes(int64_t heads);

}  // namespace eng
