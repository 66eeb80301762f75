// Deterministic pseudo-random numbers for the NIAH generators: SplitMix64 for seeding and
// xoshiro256** for streams. Every draw is defined here bit for bit (no <random> distributions,
// whose outputs differ between standard libraries), so a seed gives the same prompt everywhere.
// Thread-safety: values; one owner each.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/splitmix64.h"

namespace nw::text {

// SplitMix64 (common/splitmix64.h) seeds the streams and derives sub-stream seeds.
using nw::SplitMix64;

/// A seed for sub-stream `stream` of `seed` (independent streams for keys, haystack, placement).
inline uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  SplitMix64 sm(seed ^ (0xd1b54a32d192ed03ULL * (stream + 1)));
  sm.Next();
  return sm.Next();
}

/// xoshiro256** (Blackman & Vigna) seeded through SplitMix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    SplitMix64 sm(seed);
    for (uint64_t& s : s_) s = sm.Next();
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  /// Uniform in [0, n) without modulo bias (rejection sampling); n > 0.
  uint64_t Below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % n;
    }
  }

  /// Uniform in [0, 1) with 53 random bits.
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  /// True with probability num/den.
  bool Chance(uint64_t num, uint64_t den) { return Below(den) < num; }

  /// A uniformly chosen element of a non-empty array.
  template <typename T, size_t N>
  const T& Pick(const T (&items)[N]) {
    return items[Below(N)];
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace nw::text
