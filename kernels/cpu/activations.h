// Scalar activations and an in-place softmax for the CPU reference backend, in fp32 with the
// formulas PyTorch uses (so the oracle matches DeepSeek's reference model.py op for op).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace nw::cpu {

/// sigmoid(x) = 1 / (1 + exp(-x)).
float Sigmoid(float x);
/// silu(x) = x * sigmoid(x), computed as x / (1 + exp(-x)) like torch.nn.functional.silu.
float Silu(float x);
/// softplus(x) = log(1 + exp(x)) with torch's defaults (beta 1, threshold 20): returns x itself
/// when x > 20.
float Softplus(float x);
/// x[i] = exp(x[i] - max(x)) / sum_j exp(x[j] - max(x)) over n > 0 values; the sum runs in index
/// order, so the result is deterministic.
void SoftmaxInPlace(float* x, int64_t n);

}  // namespace nw::cpu
