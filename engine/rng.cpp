#include "engine/rng.h"

#include <cmath>

namespace eng {

std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = uint32_t(p1);
    c2 = n2;
    c3 = uint32_t(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

uint32_t Rng::next_u32() {
  uint64_t j = pos_++;
  return philox4x32(j / 4, seed_)[j % 4];
}

double Rng::uniform() { return next_u32() * (1.0 / 4294967296.0); }

double Rng::normal() {
  double u1 = (next_u32() + 1.0) * (1.0 / 4294967297.0);  // (0, 1): log is finite
  double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

Rng Rng::fork(uint64_t index) const {
  // key = seed + index * golden ratio: consecutive indices land far apart in the key space.
  const auto w = philox4x32(pos_, seed_ + index * 0x9E3779B97F4A7C15ull);
  return Rng((uint64_t(w[0]) << 32 | w[1]) ^ (uint64_t(w[2]) << 32 | w[3]) * 0xD1B54A32D192ED03ull);
}

uint64_t Rng::below(uint64_t n) { return (uint64_t(next_u32()) * n) >> 32; }

}  // namespace eng
