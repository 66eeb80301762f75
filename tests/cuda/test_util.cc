#include "tests/cuda/test_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

namespace nw::cuda::testing {

Status SyncStatus(const char* file, int line) {
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize", file, line);
}

float BitsToFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

uint32_t FloatToBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

::testing::AssertionResult BitEqual(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same =
        (std::isnan(got[i]) && std::isnan(want[i])) || FloatToBits(got[i]) == FloatToBits(want[i]);
    if (!same && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream m;
  m.precision(9);
  m << bad << " of " << got.size() << " values differ; first at " << first << ": got " << got[first]
    << " (0x" << std::hex << FloatToBits(got[first]) << "), want " << std::dec << want[first]
    << " (0x" << std::hex << FloatToBits(want[first]) << ")";
  return ::testing::AssertionFailure() << m.str();
}

template <typename T>
::testing::AssertionResult SameValues(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values differ; first at " << first << ": got "
         << static_cast<int64_t>(got[first]) << ", want " << static_cast<int64_t>(want[first]);
}

::testing::AssertionResult SameInts(const std::vector<int32_t>& got,
                                    const std::vector<int32_t>& want) {
  return SameValues(got, want);
}

::testing::AssertionResult SameBytes(const std::vector<uint8_t>& got,
                                     const std::vector<uint8_t>& want) {
  return SameValues(got, want);
}

::testing::AssertionResult Near(const std::vector<float>& got, const std::vector<double>& want,
                                Tolerance tol, const std::vector<double>* bound) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0, max_err = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    double excess;
    if (std::isnan(w) || std::isnan(g)) {
      excess = std::isnan(w) && std::isnan(g) ? -1.0 : INFINITY;
    } else if (std::isinf(w) || std::isinf(g)) {
      excess = g == w ? -1.0 : INFINITY;
    } else {
      const double err = std::fabs(g - w);
      max_err = std::max(max_err, err);
      const double allowed = bound != nullptr ? (*bound)[i] : tol.atol + tol.rtol * std::fabs(w);
      excess = err - allowed;
    }
    if (excess > 0) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  std::ostringstream m;
  m.precision(9);
  if (!got.empty()) {
    m << "max |err| " << max_err << "; worst element " << worst << ": got " << got[worst]
      << ", want " << want[worst] << ", |err| " << std::fabs(got[worst] - want[worst]);
  }
  if (bad == 0) return ::testing::AssertionSuccess() << m.str();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values out of tolerance (atol " << tol.atol
         << ", rtol " << tol.rtol << "); " << m.str();
}

::testing::AssertionResult Near(const std::vector<float>& got, const std::vector<float>& want,
                                Tolerance tol) {
  return Near(got, std::vector<double>(want.begin(), want.end()), tol);
}

double CosineDistance(const std::vector<float>& got, const std::vector<double>& want) {
  double gw = 0, gg = 0, ww = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    gw += got[i] * want[i];
    gg += static_cast<double>(got[i]) * got[i];
    ww += want[i] * want[i];
  }
  if (gg == 0 && ww == 0) return 0.0;
  return 1.0 - gw / std::sqrt(gg * ww);
}

std::vector<uint8_t> DeviceBytes(const void* ptr, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  if (bytes > 0 && cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    ADD_FAILURE() << "cudaMemcpy for a determinism check failed";
  }
  return host;
}

ExpertRouting RouteToTwoExperts(Rng& rng, int64_t x_rows, int64_t experts, int tile) {
  std::vector<std::vector<int32_t>> lists(static_cast<size_t>(experts));
  for (int64_t r = 0; r < x_rows; ++r) {
    const int64_t a = rng.Int(0, experts - 1), b = (a + rng.Int(1, experts - 1)) % experts;
    lists[static_cast<size_t>(a)].push_back(static_cast<int32_t>(r));
    lists[static_cast<size_t>(b)].push_back(static_cast<int32_t>(r));
  }
  ExpertRouting out;
  const size_t t = static_cast<size_t>(tile);
  for (int64_t e = 0; e < experts; ++e) {
    const auto& l = lists[static_cast<size_t>(e)];
    for (size_t r = 0; r < l.size(); r += t) {
      out.tile_expert.push_back(static_cast<int32_t>(e));
      out.tile_row0.push_back(static_cast<int32_t>(out.list.size() + r));
      out.tile_rows.push_back(static_cast<int32_t>(std::min(t, l.size() - r)));
    }
    for (int32_t r : l) {
      out.list.push_back(r);
      out.expert_of.push_back(static_cast<int32_t>(e));
    }
  }
  out.tile_expert.push_back(-1);
  out.tile_row0.push_back(0);
  out.tile_rows.push_back(0);
  return out;
}

}  // namespace nw::cuda::testing
