// The CUDA engine backends ("cuda", "cuda-paged", "cuda-pd"; engine/backend_catalog.h), built only
// with -DNW_CUDA=ON. A CudaBackend binds one model to the current GPU: the weights are uploaded
// once per weight format a request asks for (device_model.h) and each request runs as a
// CudaSequence (cuda_sequence.h). "cuda-pd" runs a request through two instances on the same GPU:
// a contiguous prefill sequence, the decode state exported into the PD transfer buffer
// (engine/parallel/pd_transfer.h: serialized, checksummed, deserialized and checked), and a fresh
// paged decode sequence that imports it and decodes.
// Thread-safety: a CudaBackend is used by one thread at a time (it owns one CUDA stream).
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/backend.h"

namespace nw::cuda {

/// True when this process can run a CUDA backend (a CUDA device is visible).
bool CudaBackendUsable();

/// CUDA devices visible to this process (0 without a GPU).
int DeviceCount();

/// Makes `index` the calling thread's current CUDA device (backends created afterwards on this
/// thread live on it). InvalidArgument for an index outside [0, DeviceCount()).
Status UseDevice(int index);

/// The PCI bus id of device `index` (cudaDeviceGetPCIBusId: "0000:19:00.0"), which names the
/// same GPU to NVML. InvalidArgument for an index outside [0, DeviceCount()).
Result<std::string> PciBusId(int index);

/// Creates the backend `info` names (a kCuda catalog entry) for a model whose config has been
/// validated and whose fp32 weights have been checked against it (both are checked again here,
/// before anything reaches the GPU). Unsupported without a GPU.
Result<std::unique_ptr<Backend>> CreateCudaBackend(const BackendInfo& info,
                                                   const ModelConfig& config,
                                                   std::shared_ptr<const ModelWeights> weights);

}  // namespace nw::cuda
