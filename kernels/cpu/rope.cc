#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace nw::cpu {

namespace {

// YaRN correction dim for a number of rotations (double, as the reference's Python math).
double CorrectionDim(double num_rotations, int dim, double base, double max_seq_len) {
  return dim * std::log(max_seq_len / (num_rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(base));
}

}  // namespace

std::vector<float> RopeFrequencies(const RopeParams& p) {
  const int pairs = p.rope_dim / 2;
  std::vector<float> freqs(static_cast<size_t>(pairs));
  const float base = static_cast<float>(p.base);
  const float dim = static_cast<float>(p.rope_dim);
  for (int j = 0; j < pairs; ++j) {
    const float exponent = static_cast<float>(2 * j) / dim;
    freqs[static_cast<size_t>(j)] = 1.0f / std::pow(base, exponent);
  }
  if (p.original_seq_len > 0) {
    const double osl = p.original_seq_len;
    double low = std::floor(CorrectionDim(p.beta_fast, p.rope_dim, p.base, osl));
    double high = std::ceil(CorrectionDim(p.beta_slow, p.rope_dim, p.base, osl));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(p.rope_dim - 1));
    if (low == high) high += 0.001;
    const float lowf = static_cast<float>(low);
    const float span = static_cast<float>(high - low);
    const float factor = static_cast<float>(p.factor);
    for (int j = 0; j < pairs; ++j) {
      const float ramp = std::clamp((static_cast<float>(j) - lowf) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      const float f = freqs[static_cast<size_t>(j)];
      freqs[static_cast<size_t>(j)] = f / factor * (1.0f - smooth) + f * smooth;
    }
  }
  return freqs;
}

RopeTable::RopeTable(const RopeParams& p, int64_t n_positions)
    : pairs_(p.rope_dim / 2), n_positions_(n_positions) {
  const std::vector<float> freqs = RopeFrequencies(p);
  cos_.resize(static_cast<size_t>(n_positions * pairs_));
  sin_.resize(cos_.size());
  for (int64_t t = 0; t < n_positions; ++t) {
    for (int j = 0; j < pairs_; ++j) {
      const float angle = static_cast<float>(t) * freqs[static_cast<size_t>(j)];
      const size_t k = static_cast<size_t>(t * pairs_ + j);
      cos_[k] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[k] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void ApplyRope(float* x, int pairs, const float* cos, const float* sin, bool inverse) {
  for (int j = 0; j < pairs; ++j) {
    const float a = x[2 * j];
    const float b = x[2 * j + 1];
    const float c = cos[j];
    const float s = inverse ? -sin[j] : sin[j];
    x[2 * j] = a * c - b * s;
    x[2 * j + 1] = a * s + b * c;
  }
}

}  // namespace nw::cpu
