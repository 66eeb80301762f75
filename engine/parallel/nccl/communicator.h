// RAII NCCL communicators for the GPUs of one host (built only with -DNW_CUDA=ON when NCCL is
// found; engine/CMakeLists.txt defines NW_HAVE_NCCL then). One process drives every GPU of the
// group (ncclCommInitAll), as `nw worker --gpus 0,1` would.
// Thread-safety: a communicator is used by one thread at a time; NCCL calls that span several
// devices are grouped (ncclGroupStart/End) by the functions here.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace nw::parallel {

class NcclComm {
 public:
  /// One communicator per device in `devices` (rank i drives devices[i]).
  static Result<std::vector<NcclComm>> InitAll(std::span<const int> devices);

  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&& other) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm();

  ncclComm_t get() const { return comm_; }
  int device() const { return device_; }
  int rank() const { return rank_; }

 private:
  NcclComm(ncclComm_t comm, int device, int rank) : comm_(comm), device_(device), rank_(rank) {}
  void Reset();

  ncclComm_t comm_ = nullptr;
  int device_ = -1;
  int rank_ = -1;
};

/// Sum all-reduce of `count` floats in place: buffers[i] is device memory on comms[i]'s device.
/// Runs on each device's default stream and waits for completion.
Status AllReduceSumF32(std::span<NcclComm> comms, std::span<float* const> buffers, int64_t count);

/// CUDA devices visible to this process (0 when the runtime finds none).
int VisibleCudaDevices();

}  // namespace nw::parallel
