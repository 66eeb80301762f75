// Rotary position embedding (RoPE) with optional YaRN frequency interpolation, CPU reference.
//
// Follows DeepSeek-V4's reference precompute_freqs_cis / apply_rotary_emb exactly
// (spec: docs/v4-attention.md §2.6):
//   - pair j of the rope dims has inverse frequency f_j = 1 / base^(2j / rope_dim), computed in
//     fp32 in that order;
//   - YaRN (original_seq_len > 0): with low = max(floor(cd(beta_fast)), 0) and
//     high = min(ceil(cd(beta_slow)), rope_dim - 1), where
//     cd(r) = rope_dim * ln(original_seq_len / (2*pi*r)) / (2 ln base),
//     ramp_j = clamp((j - low) / (high - low), 0, 1) (high += 0.001 when low == high),
//     smooth_j = 1 - ramp_j and f_j <- f_j / factor * (1 - smooth_j) + f_j * smooth_j (fp32).
//     No mscale / attention factor anywhere;
//   - the angle at position t is float(t) * f_j in fp32 (torch.outer), and cos/sin of that fp32
//     angle are evaluated in double and rounded to fp32;
//   - pairs are interleaved: dims (2j, 2j+1) form the complex number x_{2j} + i x_{2j+1}, which is
//     multiplied by e^{i angle} (or its conjugate for the inverse rotation).
// Thread-safety: RopeTable is immutable after construction; functions are pure.
#pragma once

#include <cstdint>
#include <vector>

namespace nw::cpu {

struct RopeParams {
  int rope_dim = 0;          // rotated dims (even); pairs = rope_dim / 2
  double base = 10000.0;     // theta
  int original_seq_len = 0;  // YaRN original context; 0 disables YaRN
  double factor = 1.0;       // YaRN factor
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

/// The rope_dim / 2 inverse frequencies (YaRN applied when original_seq_len > 0).
std::vector<float> RopeFrequencies(const RopeParams& p);

/// cos / sin of every (position, pair) for positions [0, n_positions), row-major [pos, pair].
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const RopeParams& p, int64_t n_positions);

  int pairs() const { return pairs_; }
  int64_t size() const { return n_positions_; }
  const float* cos(int64_t pos) const { return cos_.data() + pos * pairs_; }
  const float* sin(int64_t pos) const { return sin_.data() + pos * pairs_; }

 private:
  int pairs_ = 0;
  int64_t n_positions_ = 0;
  std::vector<float> cos_;
  std::vector<float> sin_;
};

/// Rotates x[0 .. 2*pairs) in place: (x0 + i x1) * (c + i s), or * (c - i s) when inverse.
void ApplyRope(float* x, int pairs, const float* cos, const float* sin, bool inverse);

}  // namespace nw::cpu
