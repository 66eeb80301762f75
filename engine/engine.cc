#include "engine/engine.h"

#include <utility>

#include "engine/backend_catalog.h"
#include "engine/checkpoint/loader.h"
#include "engine/checkpoint/model_files.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "engine/parallel/pd_backend.h"
#include "engine/text/tokenizer.h"
#ifdef NW_HAVE_CUDA_BACKEND
#include "engine/cuda/cuda_backend.h"
#endif

namespace nw {

namespace {

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Whether this build and machine can run `info`; Ok, or Unsupported saying why not.
Status Runnable(const BackendInfo& info) {
  if (info.device == DeviceKind::kCpu) return Status::Ok();
  const std::string name(info.name);
#ifdef NW_HAVE_CUDA_BACKEND
  if (cuda::CudaBackendUsable()) return Status::Ok();
  return Status::Unsupported("backend '" + name +
                             "' needs a usable NVIDIA GPU, and this machine has none (available "
                             "here: " +
                             Join(AvailableBackends()) + ")");
#else
  return Status::Unsupported("backend '" + name +
                             "' needs a CUDA build (-DNW_CUDA=ON) with the CUDA engine backend; "
                             "this nw was built without it (available here: " +
                             Join(AvailableBackends()) + ")");
#endif
}

// The catalog entry of `name` if this build and machine can run it.
Result<const BackendInfo*> Lookup(const std::string& name) {
  const BackendInfo* info = FindBackend(name);
  if (info == nullptr) {
    return Status::InvalidArgument("unknown backend '" + name + "' (expected one of " +
                                   Join(BackendNames()) + ")");
  }
  NW_RETURN_IF_ERROR(Runnable(*info));
  return info;
}

}  // namespace

Status BackendAvailableHere(const std::string& name) { return Lookup(name).status(); }

Result<std::unique_ptr<Backend>> CreateBackend(const std::string& name, const ModelConfig& config,
                                               std::shared_ptr<const ModelWeights> weights) {
  NW_ASSIGN_OR_RETURN(const BackendInfo* info, Lookup(name));
  if (info->device == DeviceKind::kCuda) {
#ifdef NW_HAVE_CUDA_BACKEND
    return cuda::CreateCudaBackend(*info, config, std::move(weights));
#else
    return Status::Internal("backend '" + name + "' passed the build check without CUDA");
#endif
  }
  if (info->disaggregated) {
    NW_ASSIGN_OR_RETURN(std::unique_ptr<parallel::PdBackend> pd,
                        parallel::PdBackend::Create(*info, config, std::move(weights)));
    return std::unique_ptr<Backend>(std::move(pd));
  }
  NW_ASSIGN_OR_RETURN(std::unique_ptr<cpu::CpuBackend> cpu,
                      cpu::CpuBackend::Create(*info, config, std::move(weights)));
  return std::unique_ptr<Backend>(std::move(cpu));
}

int CudaDeviceCount() {
#ifdef NW_HAVE_CUDA_BACKEND
  return cuda::DeviceCount();
#else
  return 0;
#endif
}

Status UseCudaDevice(int index) {
#ifdef NW_HAVE_CUDA_BACKEND
  return cuda::UseDevice(index);
#else
  (void)index;
  return Status::Unsupported("this build has no CUDA backend (-DNW_CUDA=ON)");
#endif
}

Result<std::string> CudaDevicePciBusId(int index) {
#ifdef NW_HAVE_CUDA_BACKEND
  return cuda::PciBusId(index);
#else
  (void)index;
  return Status::Unsupported("this build has no CUDA backend (-DNW_CUDA=ON)");
#endif
}

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names;
  for (const BackendInfo& b : BackendCatalog()) {
    if (b.device == DeviceKind::kCpu) {
      names.emplace_back(b.name);
      continue;
    }
#ifdef NW_HAVE_CUDA_BACKEND
    if (cuda::CudaBackendUsable()) names.emplace_back(b.name);
#endif
  }
  return names;
}

Engine::Engine(Tokenizer tokenizer, std::string model_digest, std::unique_ptr<Backend> backend)
    : tokenizer_(std::move(tokenizer)),
      digest_(std::move(model_digest)),
      backend_(std::move(backend)) {}

Result<GenerateResult> Engine::Generate(const GenerateRequest& request) {
  return nw::Generate(*backend_, request);
}

Result<std::vector<GenerateResult>> Engine::GenerateBatch(
    std::span<const GenerateRequest> requests) {
  return nw::GenerateBatch(*backend_, requests);
}

Result<std::unique_ptr<Engine>> CreateEngine(ModelConfig config, Tokenizer tokenizer,
                                             ModelWeights weights, std::string model_digest,
                                             const EngineOptions& options) {
  NW_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                      CreateBackend(options.backend, config,
                                    std::make_shared<const ModelWeights>(std::move(weights))));
  return std::make_unique<Engine>(std::move(tokenizer), std::move(model_digest),
                                  std::move(backend));
}

Result<LoadedModel> LoadModelFolder(const std::filesystem::path& model_dir) {
  NW_ASSIGN_OR_RETURN(ModelFiles files, LocateModel(model_dir));
  auto config = LoadModelConfig(files.config);
  if (!config.ok()) return config.status().WithContext(files.config.string());
  auto tokenizer = Tokenizer::Load(files.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status().WithContext(files.tokenizer.string());
  if (tokenizer->vocab_size() > config->vocab_size) {
    return Status::InvalidArgument(
        files.tokenizer.string() + ": tokenizer has " + std::to_string(tokenizer->vocab_size()) +
        " ids, more than the model's vocab_size " + std::to_string(config->vocab_size) + " in " +
        files.config.string());
  }
  auto archive = SafetensorsArchive::Open(files.dir);
  if (!archive.ok()) return archive.status().WithContext(files.dir.string());
  auto weights = LoadModelWeights(*archive, *config);
  if (!weights.ok()) return weights.status().WithContext(archive->source());
  LoadedModel m{std::move(files), std::move(config).value(), std::move(tokenizer).value(),
                std::move(weights).value()};
  return m;
}

Result<std::unique_ptr<Engine>> LoadEngine(const std::filesystem::path& model_dir,
                                           const EngineOptions& options) {
  NW_RETURN_IF_ERROR(BackendAvailableHere(options.backend));  // before reading any file
  NW_ASSIGN_OR_RETURN(LoadedModel m, LoadModelFolder(model_dir));
  auto engine = CreateEngine(std::move(m.config), std::move(m.tokenizer), std::move(m.weights),
                             m.files.digest, options);
  if (!engine.ok()) return engine.status().WithContext(m.files.dir.string());
  return engine;
}

}  // namespace nw
