#include "engine/cpu/numerics.h"

#include "kernels/quant/quant.h"

namespace nw::cpu {

void Numerics::Act(float* x, int64_t n) const {
  if (p_.activations == NumFormat::kBf16) quant::FakeQuantBf16(x, x, static_cast<size_t>(n));
}

void Numerics::IndexFormat(NumFormat f, float* x, int64_t n) {
  const size_t m = static_cast<size_t>(n);
  switch (f) {
    case NumFormat::kFp32:
      return;
    case NumFormat::kBf16:
      quant::FakeQuantBf16(x, x, m);
      return;
    case NumFormat::kFp8:
      quant::FakeQuantFp8(x, x, m, 128);
      return;
    case NumFormat::kMxfp4:
      quant::FakeQuantMxfp4(x, x, m);
      return;
    case NumFormat::kNvfp4:
      quant::FakeQuantNvfp4(x, x, m);
      return;
  }
}

void Numerics::Kv(float* x) const {
  switch (p_.kv) {
    case NumFormat::kBf16:
      quant::FakeQuantBf16(x, x, static_cast<size_t>(head_dim_));
      return;
    case NumFormat::kFp8:
      quant::FakeQuantV4Kv(x, x, head_dim_, rope_dim_);
      return;
    default:
      return;  // fp32 (Validate() rejects the fp4 formats for the KV cache)
  }
}

}  // namespace nw::cpu
