// GpuUtilizationSource over NVML, loaded with dlopen (worker/nvml_api.h declares what is used).
#include <dlfcn.h>

#include <algorithm>
#include <utility>

#include "engine/engine.h"
#include "worker/gpu_utilization.h"
#include "worker/nvml_api.h"

namespace nw {
namespace {

// Owns one dlopen handle.
class SharedLibrary {
 public:
  explicit SharedLibrary(void* handle) : handle_(handle) {}
  ~SharedLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  void* get() const { return handle_; }

 private:
  void* handle_;
};

// Looks `name` up in `lib` into *out.
template <typename Fn>
Status Symbol(const SharedLibrary& lib, const char* name, const std::string& library, Fn* out) {
  void* p = dlsym(lib.get(), name);
  if (p == nullptr) {
    return Status::Unavailable("NVML: " + library + " has no " + name +
                               " (a driver older than NVML API 10?)");
  }
  *out = reinterpret_cast<Fn>(p);
  return Status::Ok();
}

class NvmlUtilization final : public GpuUtilizationSource {
 public:
  struct Api {
    nvml::ShutdownFn shutdown = nullptr;
    nvml::ErrorStringFn error_string = nullptr;
    nvml::GetSamplesFn get_samples = nullptr;
  };
  // Takes the library after a successful nvmlInit_v2; nvmlShutdown and dlclose on destruction.
  NvmlUtilization(std::unique_ptr<SharedLibrary> lib, Api api, nvml::Device device,
                  std::string bus_id)
      : lib_(std::move(lib)), api_(api), device_(device), bus_id_(std::move(bus_id)) {}
  ~NvmlUtilization() override { api_.shutdown(); }
  NvmlUtilization(const NvmlUtilization&) = delete;
  NvmlUtilization& operator=(const NvmlUtilization&) = delete;

  Result<std::vector<UtilizationSample>> SamplesSince(uint64_t since_us) override {
    nvml::ValueType type = nvml::kValueUnsignedInt;
    unsigned int count = 0;
    nvml::Return rc =
        api_.get_samples(device_, nvml::kGpuUtilizationSamples, since_us, &type, &count, nullptr);
    if (rc == nvml::kErrorNotFound) return std::vector<UtilizationSample>{};
    if (rc != nvml::kSuccess) return Error("nvmlDeviceGetSamples (count)", rc);
    std::vector<nvml::Sample> raw(count);
    rc = api_.get_samples(device_, nvml::kGpuUtilizationSamples, since_us, &type, &count,
                          raw.data());
    if (rc == nvml::kErrorNotFound) return std::vector<UtilizationSample>{};
    if (rc != nvml::kSuccess) return Error("nvmlDeviceGetSamples", rc);
    raw.resize(std::min<size_t>(count, raw.size()));
    std::vector<UtilizationSample> out;
    out.reserve(raw.size());
    for (const nvml::Sample& s : raw) {
      if (s.timeStamp <= since_us) continue;
      double percent = 0;
      switch (type) {
        case nvml::kValueDouble:
          percent = s.sampleValue.dVal;
          break;
        case nvml::kValueUnsignedInt:
          percent = s.sampleValue.uiVal;
          break;
        case nvml::kValueUnsignedLong:
          percent = static_cast<double>(s.sampleValue.ulVal);
          break;
        case nvml::kValueUnsignedLongLong:
          percent = static_cast<double>(s.sampleValue.ullVal);
          break;
        case nvml::kValueSignedLongLong:
          percent = static_cast<double>(s.sampleValue.sllVal);
          break;
        case nvml::kValueSignedInt:
          percent = s.sampleValue.siVal;
          break;
        default:
          return Status::Internal("NVML: nvmlDeviceGetSamples returned value type " +
                                  std::to_string(type));
      }
      out.push_back({s.timeStamp, std::clamp(percent / 100.0, 0.0, 1.0)});
    }
    std::sort(out.begin(), out.end(), [](const UtilizationSample& a, const UtilizationSample& b) {
      return a.timestamp_us < b.timestamp_us;
    });
    return out;
  }

  std::string Name() const override { return "NVML GPU " + bus_id_; }

 private:
  Status Error(const char* call, nvml::Return rc) const {
    return Status::Unavailable("NVML: " + std::string(call) + " for GPU " + bus_id_ + ": " +
                               api_.error_string(rc) + " (" + std::to_string(rc) + ")");
  }

  std::unique_ptr<SharedLibrary> lib_;
  Api api_;
  nvml::Device device_;
  std::string bus_id_;
};

}  // namespace

Result<std::unique_ptr<GpuUtilizationSource>> OpenNvmlUtilization(const std::string& pci_bus_id,
                                                                  const std::string& library) {
  auto lib = std::make_unique<SharedLibrary>(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (lib->get() == nullptr) {
    const char* why = dlerror();
    return Status::Unavailable("NVML unavailable: cannot load " + library + " (" +
                               (why != nullptr ? why : "unknown reason") +
                               "; it comes with the NVIDIA driver)");
  }
  nvml::InitFn init = nullptr;
  nvml::GetHandleByPciBusIdFn by_bus = nullptr;
  NvmlUtilization::Api api;
  NW_RETURN_IF_ERROR(Symbol(*lib, "nvmlInit_v2", library, &init));
  NW_RETURN_IF_ERROR(Symbol(*lib, "nvmlShutdown", library, &api.shutdown));
  NW_RETURN_IF_ERROR(Symbol(*lib, "nvmlErrorString", library, &api.error_string));
  NW_RETURN_IF_ERROR(Symbol(*lib, "nvmlDeviceGetSamples", library, &api.get_samples));
  NW_RETURN_IF_ERROR(Symbol(*lib, "nvmlDeviceGetHandleByPciBusId_v2", library, &by_bus));
  if (nvml::Return rc = init(); rc != nvml::kSuccess) {
    return Status::Unavailable("NVML unavailable: nvmlInit_v2: " +
                               std::string(api.error_string(rc)) + " (" + std::to_string(rc) + ")");
  }
  nvml::Device device = nullptr;
  if (nvml::Return rc = by_bus(pci_bus_id.c_str(), &device); rc != nvml::kSuccess) {
    api.shutdown();
    return Status::Unavailable("NVML: no GPU with PCI bus id '" + pci_bus_id +
                               "': " + api.error_string(rc) + " (" + std::to_string(rc) + ")");
  }
  return std::unique_ptr<GpuUtilizationSource>(
      std::make_unique<NvmlUtilization>(std::move(lib), api, device, pci_bus_id));
}

Result<std::unique_ptr<GpuUtilizationSource>> OpenGpuUtilization(int cuda_device) {
  auto bus_id = CudaDevicePciBusId(cuda_device);
  if (!bus_id.ok()) {
    return Status::Unavailable("GPU busy not measured: " + bus_id.status().message());
  }
  return OpenNvmlUtilization(*bus_id);
}

}  // namespace nw
