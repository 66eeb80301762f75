// Dense linear layers through cuBLASLt: a thin RAII wrapper (handle, workspace, descriptors) for
// y = x W^T (torch Linear) with bf16 operands and fp32 accumulation.
//
// x: [tokens, in] bf16 row-major, w: [out, in] bf16 row-major (the checkpoint layout), y: [tokens,
// out] row-major, fp32 or bf16 (rounded from the fp32 accumulators). In column-major terms this is
// the "TN" GEMM C[out, tokens] = W^T' * X' that cuBLASLt serves best. The algorithm is the first
// heuristic choice for the shape and is fixed for a given shape and GPU, so results are
// deterministic run to run (split-K, if chosen, reduces fp32 partials in a separate ordered step;
// partial sums are never rounded to the output type). Not bit-exact with the CPU
// Linear (fp32 summation order differs; tolerance as for any bf16 GEMM).
// Thread-safety: a BlasLt may be used by one thread at a time (it owns one workspace).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

#include "common/status.h"
#include "kernels/cuda/common.h"

namespace nw::cuda {

/// OK for CUBLAS_STATUS_SUCCESS, else Internal("<file>:<line>: <what>: cuBLAS status <n>").
Status CublasStatus(cublasStatus_t s, const char* what, const char* file, int line);

class BlasLt {
 public:
  BlasLt() = default;
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;
  BlasLt(BlasLt&& o) noexcept
      : handle_(std::exchange(o.handle_, nullptr)), workspace_(std::move(o.workspace_)) {}
  BlasLt& operator=(BlasLt&& o) noexcept {
    if (this != &o) {
      Reset();
      handle_ = std::exchange(o.handle_, nullptr);
      workspace_ = std::move(o.workspace_);
    }
    return *this;
  }
  ~BlasLt() { Reset(); }

  /// A handle and a device workspace of `workspace_bytes` (32 MiB suits Hopper GEMMs).
  static Result<BlasLt> Create(size_t workspace_bytes = size_t{32} << 20);

  /// y[t, o] = sum_i x[t, i] * w[o, i]; y is fp32 (y_bf16 false) or bf16 bits (true).
  /// Pointers must be 16-byte aligned and `in` a multiple of 8 (cuBLASLt's bf16 requirements).
  Status LinearBf16(const uint16_t* x, const uint16_t* w, void* y, bool y_bf16, int64_t tokens,
                    int64_t in, int64_t out, cudaStream_t stream);

 private:
  void Reset();
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
};

}  // namespace nw::cuda
