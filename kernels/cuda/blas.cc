#include "kernels/cuda/blas.h"

#include <memory>
#include <string>
#include <type_traits>

namespace nw::cuda {
namespace {

#define NW_CUBLAS_RETURN_IF_ERROR(expr)                             \
  do {                                                              \
    const cublasStatus_t nw_cublas_s_ = (expr);                     \
    if (nw_cublas_s_ != CUBLAS_STATUS_SUCCESS) {                    \
      return CublasStatus(nw_cublas_s_, #expr, __FILE__, __LINE__); \
    }                                                               \
  } while (0)

// unique_ptr owners of the descriptors (deleters ignore the destroy status).
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLtMatrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLtMatmulPreferenceDestroy(d); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

Status MakeLayout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, Layout* out) {
  cublasLtMatrixLayout_t l = nullptr;
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                                       static_cast<uint64_t>(cols), ld));
  out->reset(l);
  return Status::Ok();
}

}  // namespace

Status CublasStatus(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Internal(std::string(file) + ":" + std::to_string(line) + ": " + what +
                          ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

Result<BlasLt> BlasLt::Create(size_t workspace_bytes) {
  BlasLt b;
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&b.handle_));
  NW_ASSIGN_OR_RETURN(b.workspace_, DeviceBuffer<uint8_t>::Allocate(workspace_bytes));
  return b;
}

void BlasLt::Reset() {
  if (handle_ != nullptr) cublasLtDestroy(handle_);
  handle_ = nullptr;
}

Status BlasLt::LinearBf16(const uint16_t* x, const uint16_t* w, void* y, bool y_bf16,
                          int64_t tokens, int64_t in, int64_t out, cudaStream_t stream) {
  if (handle_ == nullptr) return Status::FailedPrecondition("BlasLt used before Create");
  if (tokens < 0 || in <= 0 || out <= 0) {
    return Status::InvalidArgument("LinearBf16: need tokens >= 0, in > 0, out > 0");
  }
  if (tokens == 0) return Status::Ok();
  if (x == nullptr || w == nullptr || y == nullptr) {
    return Status::InvalidArgument("LinearBf16: null pointer");
  }
  if (in % 8 != 0 || (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
                      reinterpret_cast<uintptr_t>(y)) %
                             16 !=
                         0) {
    return Status::InvalidArgument(
        "LinearBf16: `in` must be a multiple of 8, pointers 16-byte "
        "aligned");
  }
  cublasLtMatmulDesc_t raw_desc = nullptr;
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  MatmulDesc desc(raw_desc);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  NW_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  NW_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major view: A = w as [in, out] (op T -> [out, in]), B = x as [in, tokens],
  // C = y as [out, tokens].
  Layout a, bl, c;
  NW_RETURN_IF_ERROR(MakeLayout(CUDA_R_16BF, in, out, in, &a));
  NW_RETURN_IF_ERROR(MakeLayout(CUDA_R_16BF, in, tokens, in, &bl));
  NW_RETURN_IF_ERROR(MakeLayout(y_bf16 ? CUDA_R_16BF : CUDA_R_32F, out, tokens, out, &c));
  cublasLtMatmulPreference_t raw_pref = nullptr;
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&raw_pref));
  Preference pref(raw_pref);
  const uint64_t ws = workspace_.bytes();
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // Split-K partial sums only in fp32 (never rounded to a bf16 output in between).
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(
      handle_, desc.get(), a.get(), bl.get(), c.get(), c.get(), pref.get(), 1, &heuristic, &found));
  if (found == 0) return Status::Unsupported("LinearBf16: cuBLASLt found no algorithm");
  const float alpha = 1.0f, beta = 0.0f;
  NW_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle_, desc.get(), &alpha, w, a.get(), x, bl.get(),
                                           &beta, y, c.get(), y, c.get(), &heuristic.algo,
                                           workspace_.data(), workspace_.bytes(), stream));
  return Status::Ok();
}

}  // namespace nw::cuda
