// Tensor maps for the bulk tensor copy engine (see tensor_map.h).
#include "kernels/cuda/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>

namespace nw::cuda {
namespace {

/// cuTensorMapEncodeTiled from the driver (looked up once; the pointer never changes after), or
/// null when the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 EncodeTiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

Result<CUtensorMap> Bf16RowsSw128Map(const void* base, uint64_t rows, uint64_t cols,
                                     uint32_t box_rows) {
  if (base == nullptr || rows == 0 || cols == 0) {
    return Status::InvalidArgument("tensor map: empty or null matrix");
  }
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || (cols * 2) % 16 != 0) {
    return Status::InvalidArgument(
        "tensor map: base must be 16-byte aligned and rows a multiple "
        "of 16 bytes, got cols " +
        std::to_string(cols));
  }
  if (box_rows == 0 || box_rows > 256 || rows >= (uint64_t{1} << 32)) {
    return Status::InvalidArgument("tensor map: box rows must be in [1, 256] and rows < 2^32");
  }
  const PFN_cuTensorMapEncodeTiled_v12000 encode = EncodeTiled();
  if (encode == nullptr) {
    return Status::Internal("cuTensorMapEncodeTiled: not found in the CUDA driver");
  }
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * 2};
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
             elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::Internal("cuTensorMapEncodeTiled failed with CUresult " + std::to_string(r));
  }
  return map;
}

}  // namespace nw::cuda
