// Shared pieces of the CUDA test-backend-ops program: GPU presence checks, deterministic random
// inputs, device buffers with sentinel guard regions, and element-wise comparisons that print the
// worst element. Host code (compiled as C++).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/splitmix64.h"
#include "common/status.h"
#include "kernels/cuda/common.h"
#include "tests/support/status_matchers.h"

namespace nw::cuda::testing {

/// Skips the test when no CUDA device is present (CI has none).
#define NW_REQUIRE_GPU()                                                \
  do {                                                                  \
    if (!::nw::cuda::HasCudaDevice()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// NW_ASSERT_OK: tests/support/status_matchers.h.

/// Synchronizes the device and fails the test on a pending CUDA error.
#define NW_ASSERT_SYNC() NW_ASSERT_OK(::nw::cuda::testing::SyncStatus(__FILE__, __LINE__))

Status SyncStatus(const char* file, int line);

/// Deterministic generator (SplitMix64); the seed is printed by the tests on failure.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() { return s_.Next(); }
  /// Uniform in [lo, hi).
  float Uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(Next() >> 40) * 0x1p-24);
  }
  /// Uniform integer in [lo, hi].
  int64_t Int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  std::vector<float> Vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = Uniform(lo, hi);
    return v;
  }
  /// Values spread over many binades (sign, exponent 2^-20 .. 2^12), the stress input of the
  /// quantizers.
  float Wide() {
    const float m = Uniform(1.0f, 2.0f);
    const int e = static_cast<int>(Int(-20, 12));
    return (Next() & 1 ? -1.0f : 1.0f) * std::ldexp(m, e);
  }

 private:
  SplitMix64 s_;
};

/// Rows 0 .. x_rows - 1 each routed to two different experts of `experts` (drawn from `rng`),
/// listed the way MoE dispatch lists them: every expert's rows in row order, cut into tiles of at
/// most `tile` rows (each expert's last tile partial), then one unused tile (expert -1).
struct ExpertRouting {
  std::vector<int32_t> list;       // x row of each gathered row
  std::vector<int32_t> expert_of;  // expert of each gathered row
  std::vector<int32_t> tile_expert, tile_row0, tile_rows;
};
ExpertRouting RouteToTwoExperts(Rng& rng, int64_t x_rows, int64_t experts, int tile);

float BitsToFloat(uint32_t u);
uint32_t FloatToBits(float x);

/// A device array of n elements between two guard regions of sentinel bytes; the inner region
/// is poisoned until written (bytes 0xFF for floats: NaN; 0x7F otherwise: a large positive value,
/// never the -1 padding of index outputs).
/// Check() reports any guard byte that changed (an out-of-bounds write).
template <typename T>
class Guarded {
 public:
  static constexpr size_t kGuardBytes = 4096;
  static constexpr uint8_t kSentinel = 0xA5;
  static constexpr uint8_t kPoison = std::is_floating_point_v<T> ? 0xFF : 0x7F;

  explicit Guarded(size_t n) : n_(n) {
    const size_t total = 2 * kGuardBytes + n * sizeof(T);
    auto r = DeviceBuffer<uint8_t>::Allocate(total);
    status_ = r.status();
    if (!r.ok()) return;
    buf_ = std::move(r).value();
    std::vector<uint8_t> init(total, kSentinel);
    std::memset(init.data() + kGuardBytes, kPoison, n * sizeof(T));
    status_ = buf_.CopyFromHost(init.data(), total);
  }
  explicit Guarded(const std::vector<T>& host) : Guarded(host.size()) { Upload(host); }

  const Status& status() const { return status_; }
  T* get() { return reinterpret_cast<T*>(buf_.data() + kGuardBytes); }
  const T* get() const { return reinterpret_cast<const T*>(buf_.data() + kGuardBytes); }
  size_t size() const { return n_; }

  void Upload(const std::vector<T>& host) {
    if (!status_.ok()) return;
    status_ = buf_.CopyFromHost(reinterpret_cast<const uint8_t*>(host.data()),
                                std::min(host.size(), n_) * sizeof(T), kGuardBytes);
  }
  /// Sets every byte of the inner region (e.g. 0 before a kernel that writes only some bytes).
  void Fill(uint8_t byte) {
    if (!status_.ok()) return;
    std::vector<uint8_t> b(n_ * sizeof(T), byte);
    status_ = buf_.CopyFromHost(b.data(), b.size(), kGuardBytes);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    if (n_ > 0) {
      const Status s =
          buf_.CopyToHost(reinterpret_cast<uint8_t*>(host.data()), n_ * sizeof(T), kGuardBytes);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return host;
  }
  /// Success when both guard regions still hold the sentinel.
  ::testing::AssertionResult GuardsIntact() const {
    std::vector<uint8_t> front(kGuardBytes), back(kGuardBytes);
    Status s = buf_.CopyToHost(front.data(), kGuardBytes, 0);
    if (s.ok()) s = buf_.CopyToHost(back.data(), kGuardBytes, kGuardBytes + n_ * sizeof(T));
    if (!s.ok()) return ::testing::AssertionFailure() << s.ToString();
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (front[i] != kSentinel) {
        return ::testing::AssertionFailure()
               << "write before the buffer: guard byte " << i << " of " << kGuardBytes;
      }
      if (back[i] != kSentinel) {
        return ::testing::AssertionFailure() << "write past the end: byte " << i << " after";
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  size_t n_;
  Status status_;
  DeviceBuffer<uint8_t> buf_;
};

/// Bitwise equality of floats (any NaN equals any NaN); prints the count and the first mismatch.
::testing::AssertionResult BitEqual(const std::vector<float>& got, const std::vector<float>& want);
/// Exact equality of integers or bytes; prints the count and the first mismatch.
::testing::AssertionResult SameInts(const std::vector<int32_t>& got,
                                    const std::vector<int32_t>& want);
::testing::AssertionResult SameBytes(const std::vector<uint8_t>& got,
                                     const std::vector<uint8_t>& want);

/// Element-wise |got - want| <= atol + rtol * |want| (or `bound[i]` when given, replacing the
/// atol + rtol * |want| term), NaN only where want is NaN, infinities equal. Prints the worst
/// element (index, got, want, error) and the number of failures.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};
::testing::AssertionResult Near(const std::vector<float>& got, const std::vector<double>& want,
                                Tolerance tol, const std::vector<double>* bound = nullptr);
::testing::AssertionResult Near(const std::vector<float>& got, const std::vector<float>& want,
                                Tolerance tol);

/// 1 - cos(got, want) over all elements (0 for identical directions).
double CosineDistance(const std::vector<float>& got, const std::vector<double>& want);

/// Bytes of a device range, for run-to-run determinism checks.
std::vector<uint8_t> DeviceBytes(const void* ptr, size_t bytes);

}  // namespace nw::cuda::testing
