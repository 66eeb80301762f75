#include "engine/parallel/nccl/communicator.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

namespace nw::parallel {

namespace {

Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + ncclGetErrorString(r));
}

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

Result<std::vector<NcclComm>> NcclComm::InitAll(std::span<const int> devices) {
  if (devices.empty()) return Status::InvalidArgument("NCCL group needs at least one device");
  const int available = VisibleCudaDevices();
  for (int d : devices) {
    if (d < 0 || d >= available) {
      return Status::InvalidArgument("CUDA device " + std::to_string(d) + " not visible (" +
                                     std::to_string(available) + " devices)");
    }
  }
  std::vector<ncclComm_t> raw(devices.size(), nullptr);
  NW_RETURN_IF_ERROR(
      NcclStatus(ncclCommInitAll(raw.data(), static_cast<int>(devices.size()), devices.data()),
                 "ncclCommInitAll"));
  std::vector<NcclComm> comms;
  comms.reserve(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    comms.push_back(NcclComm(raw[i], devices[i], static_cast<int>(i)));
  }
  return comms;
}

NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      device_(std::exchange(other.device_, -1)),
      rank_(std::exchange(other.rank_, -1)) {}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    Reset();
    comm_ = std::exchange(other.comm_, nullptr);
    device_ = std::exchange(other.device_, -1);
    rank_ = std::exchange(other.rank_, -1);
  }
  return *this;
}

NcclComm::~NcclComm() { Reset(); }

void NcclComm::Reset() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  comm_ = nullptr;
}

Status AllReduceSumF32(std::span<NcclComm> comms, std::span<float* const> buffers, int64_t count) {
  if (comms.size() != buffers.size() || comms.empty() || count < 0) {
    return Status::InvalidArgument("all-reduce needs one buffer per communicator");
  }
  NW_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  Status st = Status::Ok();
  for (size_t i = 0; i < comms.size() && st.ok(); ++i) {
    st = CudaStatus(cudaSetDevice(comms[i].device()), "cudaSetDevice");
    if (st.ok()) {
      st = NcclStatus(ncclAllReduce(buffers[i], buffers[i], static_cast<size_t>(count), ncclFloat32,
                                    ncclSum, comms[i].get(), nullptr),
                      "ncclAllReduce");
    }
  }
  const Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  NW_RETURN_IF_ERROR(st);
  NW_RETURN_IF_ERROR(end);
  for (const NcclComm& c : comms) {
    NW_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(c.device()), "cudaSetDevice"));
    NW_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  }
  return Status::Ok();
}

int VisibleCudaDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace nw::parallel
