#include "kernels/cpu/activations.h"

#include <cmath>

namespace nw::cpu {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

float Softplus(float x) {
  constexpr float kThreshold = 20.0f;  // torch.nn.functional.softplus default
  return x > kThreshold ? x : std::log1p(std::exp(x));
}

void SoftmaxInPlace(float* x, int64_t n) {
  float max_value = x[0];
  for (int64_t i = 1; i < n; ++i) max_value = std::fmax(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

}  // namespace nw::cpu
