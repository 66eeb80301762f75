// SplitMix64 (Vigna): the one 64-bit mixer and stream every seeded generator of needlework is
// built on (NIAH text, random weights and checkpoints, training data, the sampler of `nw serve`).
// Defined bit for bit here, so a seed gives the same numbers on every build and library.
// Thread-safety: values; a SplitMix64 has one owner.
#pragma once

#include <cstdint>

namespace nw {

/// The golden-ratio increment of the SplitMix64 state.
inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ull;

/// The SplitMix64 output function: a bijective mix of one 64-bit value.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The SplitMix64 stream: the state advances by kSplitMix64Gamma, each value is Mix64(state).
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}
  constexpr uint64_t Next() { return Mix64(state_ += kSplitMix64Gamma); }
  /// Uniform in [0, 1) with 53 random bits.
  constexpr double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace nw
