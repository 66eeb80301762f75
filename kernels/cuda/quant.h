// Quantizers of DeepSeek-V4's number formats on the GPU, bit-exact with kernels/quant (the same
// scalar codecs from scalar.h run on both sides). A "row" is one quantization tensor: the unit
// over which NVFP4 takes its global scale, and the unit that blocks never straddle.
//
//   fake quantization   fp32 -> fp32 (quantize, then dequantize), row by row exactly as
//                       quant::FakeQuant{Bf16,Fp8,Mxfp4,Nvfp4,V4Kv} over that row's values;
//   packed storage      fp32 -> codes + scales, and back: FP8 (e4m3 + ue8m0 byte per block),
//                       MXFP4 (e2m1 pairs, low nibble = even element, ue8m0 per 32), NVFP4 (e2m1
//                       pairs, e4m3 per 16, fp32 per row), bf16 bits, and the V4 fp8 KV cache in
//                       FlashMLA's MODEL1 page layout. Dequantizing a packed row gives exactly the
//                       fake-quantized row.
//
// Strides are in elements of the pointer's type and 0 means "dense" (= cols, or the packed width).
// All launchers check their params on the host and return InvalidArgument before launching.
// Thread-safety: launchers are reentrant; concurrent launches must not write overlapping memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/quant/scalar.h"  // NW_HD

namespace nw::cuda {

enum class QuantFormat {
  kBf16,   // round to nearest even
  kFp8,    // e4m3, one ue8m0 scale per fp8_block values (0: the whole row)
  kMxfp4,  // e2m1, ue8m0 scale per 32
  kNvfp4,  // e2m1, e4m3 scale per 16, fp32 global scale per row
  kV4Kv,   // row = one token [nope | rope]: nope e4m3 per-64 ue8m0, rope bf16
};

struct FakeQuantParams {
  const float* x = nullptr;  // [rows, x_stride]; the first `cols` values of each row
  float* y = nullptr;        // [rows, y_stride]; may equal x (in place, same stride)
  int64_t rows = 0;
  int cols = 0;
  int64_t x_stride = 0;
  int64_t y_stride = 0;
  QuantFormat format = QuantFormat::kBf16;
  int fp8_block = 128;  // kFp8 only
  int rope_dim = 0;     // kV4Kv only: trailing bf16 dims; cols - rope_dim must be a multiple of 64
};
Status LaunchFakeQuant(const FakeQuantParams& p, cudaStream_t stream);

// ---- Packed storage -----------------------------------------------------------------------------

struct PackBf16Params {
  const float* x = nullptr;  // [rows, x_stride]
  uint16_t* y = nullptr;     // [rows, y_stride] bf16 bits
  int64_t rows = 0;
  int cols = 0;
  int64_t x_stride = 0;
  int64_t y_stride = 0;
};
Status LaunchPackBf16(const PackBf16Params& p, cudaStream_t stream);

/// Packed block format of a row of `cols` values.
enum class PackedFormat { kFp8, kMxfp4, kNvfp4 };

/// Packed layout of one row: codes, then per-block scale bytes, plus (NVFP4) one fp32 per row.
///   kFp8:   codes [cols] e4m3,        scales [ceil(cols / block)] ue8m0
///   kMxfp4: codes [cols / 2] e2m1x2,  scales [ceil(cols / 32)] ue8m0        (cols even)
///   kNvfp4: codes [cols / 2] e2m1x2,  scales [ceil(cols / 16)] e4m3, global [1] fp32 (cols even)
struct PackParams {
  const float* x = nullptr;   // [rows, x_stride]
  uint8_t* codes = nullptr;   // [rows, codes_stride] bytes
  uint8_t* scales = nullptr;  // [rows, scales_stride] bytes
  float* global = nullptr;    // [rows] (kNvfp4 only)
  int64_t rows = 0;
  int cols = 0;
  int64_t x_stride = 0;
  int64_t codes_stride = 0;
  int64_t scales_stride = 0;
  PackedFormat format = PackedFormat::kFp8;
  int fp8_block = 128;  // kFp8: values per scale (0: the whole row)
};
Status LaunchPack(const PackParams& p, cudaStream_t stream);

/// The inverse of LaunchPack: y = the fake-quantized values (same params; x unused, y written).
struct UnpackParams {
  const uint8_t* codes = nullptr;   // [rows, codes_stride]
  const uint8_t* scales = nullptr;  // [rows, scales_stride]
  const float* global = nullptr;    // [rows] (kNvfp4 only)
  float* y = nullptr;               // [rows, y_stride]
  int64_t rows = 0;
  int cols = 0;
  int64_t codes_stride = 0;
  int64_t scales_stride = 0;
  int64_t y_stride = 0;
  PackedFormat format = PackedFormat::kFp8;
  int fp8_block = 128;
};
Status LaunchUnpack(const UnpackParams& p, cudaStream_t stream);

// ---- V4 fp8 KV cache (FlashMLA MODEL1 layout) ---------------------------------------------------
// A page holds page_size tokens: first every token's [nope e4m3 | rope bf16] bytes (token t at
// t * TokenBytes()), then every token's scale group (token t at page_size * TokenBytes() +
// t * ScaleStride(): nope/64 ue8m0 bytes, zero padding to ScaleStride()), the page padded with
// zeros to a multiple of 576 bytes. V4-Flash (512 = 448 + 64): 576 + 8 bytes a token, 64-token
// pages of 37440 bytes.
struct V4KvLayout {
  int head_dim = 512;
  int rope_dim = 64;
  int page_size = 64;

  NW_HD int nope() const { return head_dim - rope_dim; }
  NW_HD int scale_count() const { return nope() / 64; }
  NW_HD int64_t TokenBytes() const { return nope() + 2 * static_cast<int64_t>(rope_dim); }
  /// scale_count() bytes and at least one zero byte, rounded up to 8 (V4-Flash: 7 + 1).
  NW_HD int64_t ScaleStride() const { return (scale_count() + 8) / 8 * 8; }
  NW_HD int64_t PageBytes() const {
    const int64_t raw = page_size * (TokenBytes() + ScaleStride());
    return (raw + 575) / 576 * 576;
  }
  Status Validate() const;
};

/// Writes tokens into a paged V4 KV cache: token i goes to slot slots[i] (page = slot /
/// page_size, offset = slot % page_size); a slot outside [0, num_pages * page_size), -1 included,
/// skips the token.
struct StoreV4KvParams {
  const float* x = nullptr;        // [tokens, x_stride] fp32 [nope | rope]
  const int64_t* slots = nullptr;  // [tokens]
  uint8_t* cache = nullptr;        // [pages, layout.PageBytes()]
  int64_t tokens = 0;
  int64_t x_stride = 0;
  int64_t num_pages = 0;  // slots must be < num_pages * page_size
  V4KvLayout layout;
};
Status LaunchStoreV4Kv(const StoreV4KvParams& p, cudaStream_t stream);

/// Reads tokens back: y[i] = the fake-quantized token in slot slots[i]; a slot outside the cache
/// (-1 included) gives a row of zeros.
struct LoadV4KvParams {
  const uint8_t* cache = nullptr;  // [pages, layout.PageBytes()]
  const int64_t* slots = nullptr;  // [tokens]
  float* y = nullptr;              // [tokens, y_stride]
  int64_t tokens = 0;
  int64_t y_stride = 0;
  int64_t num_pages = 0;
  V4KvLayout layout;
};
Status LaunchLoadV4Kv(const LoadV4KvParams& p, cudaStream_t stream);

}  // namespace nw::cuda
