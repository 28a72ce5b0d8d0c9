// Counter-based RNG (Philox4x32-10, Salmon et al. 2011). The stream is defined by position:
// the j-th 32-bit word is word j%4 of philox(counter = j/4, key = seed), so any element of a
// random fill can be computed independently (a GPU kernel reproduces a CPU fill), and the whole
// state is (seed, position): saving those two numbers in a checkpoint resumes the stream exactly.
#pragma once
#include <array>
#include <cstdint>

namespace eng {

std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t key);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t position = 0) : seed_(seed), pos_(position) {}
  uint64_t seed() const { return seed_; }
  uint64_t position() const { return pos_; }  // words consumed so far
  void set_position(uint64_t p) { pos_ = p; }

  uint32_t next_u32();
  double uniform();  // [0, 1), 32 bits of resolution
  double normal();   // N(0, 1) by Box-Muller; consumes two words
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^32).
  uint64_t below(uint64_t n);
  // A generator of its own (position 0) whose seed is a Philox hash of (seed, position, index): distinct indices
  // or states give streams that share nothing. Does not advance this one.
  Rng fork(uint64_t index) const;

 private:
  uint64_t seed_;
  uint64_t pos_;
};

}  // namespace eng
