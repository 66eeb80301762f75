// GPU workers (`nw worker --gpu N`, `nw worker --gpus all|0,2`): what a request asks for, whether
// this build can honour it, and the per-GPU worker processes that `--gpus` starts (one
// `nw worker --gpu i` process per GPU, each seeing only its GPU). Pure functions over values: the
// device list comes from nvidia-smi in `nw worker` (cli/cmd_worker.cc) and from the test in
// tests/worker/gpu_plan_test.cc.
//
// Honesty rule: a GPU worker is refused (never silently run on the CPU, never faked) unless the
// build has CUDA, the engine has a CUDA backend to run jobs with, and the requested GPUs exist.
// The engine's cuda* backends (catalog device kCuda) exist only in a CUDA build with the CUDA
// engine backend, and AvailableBackends() lists them only where a usable GPU is found; until
// then every GPU request ends in a clear refusal.
//
// Thread-safety: values and free functions; no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace nw {

/// One GPU as nvidia-smi numbers it.
struct GpuDevice {
  int index = 0;  // nvidia-smi's index (PCI bus order)
  std::string name;
  int64_t memory_mib = 0;
  friend bool operator==(const GpuDevice&, const GpuDevice&) = default;
};

/// The query `nw worker` runs to list GPUs.
inline constexpr std::string_view kNvidiaSmiGpuQuery =
    "nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits";

/// Parses the output of kNvidiaSmiGpuQuery ("0, NVIDIA H200, 143771" per line). Empty output is
/// no GPU. A line that is not INDEX, NAME, MIB is InvalidArgument naming it.
Result<std::vector<GpuDevice>> ParseNvidiaSmiGpus(std::string_view text);

/// What this build offers for running jobs on a GPU.
struct GpuSupport {
  bool cuda_build = false;                   // compiled with -DNW_CUDA=ON
  std::vector<std::string> engine_backends;  // AvailableBackends(): a GPU needs a cuda* one
};

/// This build's GpuSupport (NW_CUDA and the engine's AvailableBackends()).
GpuSupport ThisBuildGpuSupport();

/// The engine backends a GPU worker runs (those of the catalog's device kCuda).
std::vector<std::string> GpuBackends(const GpuSupport& support);

/// Whether a GPU worker can run here. FailedPrecondition with the reason, checked in this order:
/// no CUDA in the build; no cuda* engine backend that can run here (no usable GPU); no GPU
/// visible. Each message says what to do instead (--cpu).
Status CheckGpuWorkerSupport(const GpuSupport& support, const std::vector<GpuDevice>& devices);

/// The GPUs a request names: `--gpu N` (gpu set) is {N}; `--gpus all` every device; `--gpus
/// 0,2` those indices, in the order given. InvalidArgument for a malformed list, a repeated
/// index, or an index that is not among `devices` (the message lists the ones there are).
Result<std::vector<int>> SelectGpus(std::optional<int> gpu, std::string_view gpus,
                                    const std::vector<GpuDevice>& devices);

/// The environment a worker for GPU `index` runs with: CUDA numbers devices fastest first unless
/// told PCI_BUS_ID, so both variables are set to make CUDA's device 0 nvidia-smi's `index`.
std::vector<std::pair<std::string, std::string>> GpuWorkerEnvironment(int index);

/// One worker process per selected GPU.
struct GpuWorkerProcess {
  int gpu = 0;
  std::vector<std::string> argv;  // argv[0] is the nw executable
};

/// `--gpus`: the processes to start, one `nw worker --gpu i` per GPU in `gpus`:
///   argv = {nw_exe, global_args..., "worker", "--gpu", i, ["--id", ID-gpuI], worker_args...}
/// where global_args come before the subcommand (e.g. --db FILE) and the id is set only when the
/// parent was given one (otherwise each child takes its own HOST-PID).
std::vector<GpuWorkerProcess> PlanGpuWorkers(const std::string& nw_exe,
                                             const std::vector<std::string>& global_args,
                                             const std::vector<int>& gpus,
                                             const std::string& worker_id,
                                             const std::vector<std::string>& worker_args);

}  // namespace nw
