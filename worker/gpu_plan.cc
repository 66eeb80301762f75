#include "worker/gpu_plan.h"

#include <algorithm>
#include <charconv>

#include "engine/backend_catalog.h"
#include "engine/engine.h"

namespace nw {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

template <typename T>
bool ParseInt(std::string_view s, T* out) {
  s = Trim(s);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string IndexList(const std::vector<GpuDevice>& devices) {
  std::string out;
  for (const auto& d : devices) out += (out.empty() ? "" : ", ") + std::to_string(d.index);
  return out.empty() ? "none" : out;
}

}  // namespace

Result<std::vector<GpuDevice>> ParseNvidiaSmiGpus(std::string_view text) {
  std::vector<GpuDevice> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = Trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty()) continue;
    // The name may itself contain commas: INDEX is before the first, MIB after the last.
    const size_t first = line.find(',');
    const size_t last = line.rfind(',');
    GpuDevice d;
    if (first == std::string_view::npos || first == last ||
        !ParseInt(line.substr(0, first), &d.index) || d.index < 0 ||
        !ParseInt(line.substr(last + 1), &d.memory_mib) || d.memory_mib < 0) {
      return Status::InvalidArgument("nvidia-smi: expected 'INDEX, NAME, MEMORY_MIB', got '" +
                                     std::string(line) + "'");
    }
    d.name = std::string(Trim(line.substr(first + 1, last - first - 1)));
    out.push_back(std::move(d));
  }
  return out;
}

GpuSupport ThisBuildGpuSupport() {
  GpuSupport s;
#if defined(NW_CUDA_BUILD) && NW_CUDA_BUILD
  s.cuda_build = true;
#endif
  s.engine_backends = AvailableBackends();
  return s;
}

std::vector<std::string> GpuBackends(const GpuSupport& support) {
  std::vector<std::string> out;
  for (const auto& b : support.engine_backends) {
    const BackendInfo* info = FindBackend(b);
    if (info != nullptr && info->device == DeviceKind::kCuda) out.push_back(b);
  }
  return out;
}

Status CheckGpuWorkerSupport(const GpuSupport& support, const std::vector<GpuDevice>& devices) {
  std::string backends;
  for (const auto& b : support.engine_backends) backends += (backends.empty() ? "" : ", ") + b;
  if (!support.cuda_build) {
    return Status::FailedPrecondition(
        "this nw was built without CUDA (-DNW_CUDA=OFF; engine backends: " + backends +
        "), so it cannot run jobs on a GPU; use --cpu, or a build with -DNW_CUDA=ON and a CUDA "
        "engine backend");
  }
  if (GpuBackends(support).empty()) {
    return Status::FailedPrecondition(
        "no cuda* engine backend can run here (engine backends available: " + backends +
        "): CUDA sees no usable GPU, or this build lacks the CUDA engine backend (docs/cuda.md), "
        "so it cannot run jobs on a GPU; use --cpu");
  }
  if (devices.empty()) {
    return Status::FailedPrecondition("no GPU found (`" + std::string(kNvidiaSmiGpuQuery) +
                                      "` lists none, or nvidia-smi is missing); use --cpu");
  }
  return Status::Ok();
}

Result<std::vector<int>> SelectGpus(std::optional<int> gpu, std::string_view gpus,
                                    const std::vector<GpuDevice>& devices) {
  auto present = [&devices](int i) {
    return std::any_of(devices.begin(), devices.end(),
                       [i](const GpuDevice& d) { return d.index == i; });
  };
  std::vector<int> out;
  if (gpu.has_value()) {
    if (!gpus.empty()) return Status::InvalidArgument("give --gpu N or --gpus, not both");
    out.push_back(*gpu);
  } else if (gpus == "all") {
    for (const auto& d : devices) out.push_back(d.index);
    if (out.empty()) return Status::InvalidArgument("--gpus all: no GPU found");
    return out;
  } else {
    std::string_view rest = gpus;
    while (true) {
      const size_t comma = rest.find(',');
      int i = -1;
      if (!ParseInt(rest.substr(0, comma), &i) || i < 0) {
        return Status::InvalidArgument(
            "--gpus takes 'all' or a list of GPU indices like 0,2; got '" + std::string(gpus) +
            "'");
      }
      if (std::find(out.begin(), out.end(), i) != out.end()) {
        return Status::InvalidArgument("--gpus " + std::string(gpus) + ": GPU " +
                                       std::to_string(i) + " is listed twice");
      }
      out.push_back(i);
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  for (int i : out) {
    if (!present(i)) {
      return Status::InvalidArgument("there is no GPU " + std::to_string(i) +
                                     " (GPUs here: " + IndexList(devices) + ")");
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> GpuWorkerEnvironment(int index) {
  return {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}, {"CUDA_VISIBLE_DEVICES", std::to_string(index)}};
}

std::vector<GpuWorkerProcess> PlanGpuWorkers(const std::string& nw_exe,
                                             const std::vector<std::string>& global_args,
                                             const std::vector<int>& gpus,
                                             const std::string& worker_id,
                                             const std::vector<std::string>& worker_args) {
  std::vector<GpuWorkerProcess> out;
  out.reserve(gpus.size());
  for (int i : gpus) {
    GpuWorkerProcess p;
    p.gpu = i;
    p.argv.push_back(nw_exe);
    p.argv.insert(p.argv.end(), global_args.begin(), global_args.end());
    p.argv.insert(p.argv.end(), {"worker", "--gpu", std::to_string(i)});
    if (!worker_id.empty())
      p.argv.insert(p.argv.end(), {"--id", worker_id + "-gpu" + std::to_string(i)});
    p.argv.insert(p.argv.end(), worker_args.begin(), worker_args.end());
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace nw
