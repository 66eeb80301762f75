// Where a GPU worker's busy fraction comes from: a source of the GPU's utilization samples, each
// the share of one of the driver's sample periods in which a kernel ran (what nvidia-smi calls
// utilization.gpu). The real one reads NVML (nvmlDeviceGetSamples with
// NVML_GPU_UTILIZATION_SAMPLES), opened at run time with dlopen so that nothing needs NVML to
// build or run; tests inject fakes. worker/gpu_busy_sampler.h turns samples into busy fractions.
// Thread-safety: a source is used by one thread at a time (the sampler serializes its calls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace nw {

struct UtilizationSample {
  uint64_t timestamp_us = 0;  // the source's timestamp (NVML: CPU time in microseconds)
  double busy = 0;            // 0..1: share of the sample period in which the GPU was busy
};

class GpuUtilizationSource {
 public:
  virtual ~GpuUtilizationSource() = default;
  /// The samples with a timestamp after `since_us`, oldest first (none is not an error).
  virtual Result<std::vector<UtilizationSample>> SamplesSince(uint64_t since_us) = 0;
  /// What is measured, for logs: "NVML GPU 00000000:19:00.0".
  virtual std::string Name() const = 0;
};

/// The library OpenNvmlUtilization loads by default (the driver's, never a build dependency).
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

/// NVML's utilization samples of the GPU with this PCI bus id (as cudaDeviceGetPCIBusId writes
/// it, e.g. "0000:19:00.0"). Owns the dlopen handle and the nvmlInit_v2/nvmlShutdown pair.
/// Unavailable, saying why, when the library cannot be loaded (no NVIDIA driver), lacks an entry
/// point, fails to initialize or does not know the bus id.
Result<std::unique_ptr<GpuUtilizationSource>> OpenNvmlUtilization(
    const std::string& pci_bus_id, const std::string& library = kNvmlLibrary);

/// OpenNvmlUtilization for CUDA device `cuda_device` of this process (its PCI bus id from the
/// CUDA runtime). Unavailable without a CUDA build or when NVML is unavailable, saying why.
Result<std::unique_ptr<GpuUtilizationSource>> OpenGpuUtilization(int cuda_device);

}  // namespace nw
