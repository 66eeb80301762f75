#include "kernels/cpu/hadamard.h"

namespace nw::cpu {

bool IsPowerOfTwo(int64_t n) { return n >= 1 && (n & (n - 1)) == 0; }

void HadamardTransform(float* x, int64_t n, float scale) {
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace nw::cpu
