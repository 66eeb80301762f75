#include "engine/engine.h"

#include <map>
#include <utility>

#include "engine/checkpoint/loader.h"
#include "engine/checkpoint/model_files.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/cpu/batch.h"
#include "engine/cpu/generate.h"
#include "engine/cpu/sequence.h"
#include "engine/parallel/pd_generate.h"
#include "engine/text/tokenizer.h"

namespace nw {

namespace {

// The CPU reference engine: fp32 weights as loaded, plus one requantized copy per weight format
// that a request has asked for (made on first use, then reused). "cpu-pd" runs each request
// through a prefill and a decode instance (engine/parallel/pd_generate.h).
class CpuEngine final : public Engine {
 public:
  CpuEngine(ModelConfig config, Tokenizer tokenizer, ModelWeights weights, std::string digest,
            std::string backend, cpu::BackendOptions options)
      : config_(std::move(config)),
        tokenizer_(std::move(tokenizer)),
        weights_(std::move(weights)),
        digest_(std::move(digest)),
        backend_(std::move(backend)),
        options_(options),
        pd_(backend_ == parallel::kCpuPdBackend) {}

  const ModelConfig& config() const override { return config_; }
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  std::string backend() const override { return backend_; }
  std::string device() const override { return "cpu"; }
  const std::string& model_digest() const override { return digest_; }

  Result<GenerateResult> Generate(const GenerateRequest& request) override {
    NW_RETURN_IF_ERROR(request.precision.Validate());
    const ModelWeights& weights = WeightsFor(request.precision.weights);
    if (pd_) return parallel::GeneratePd(config_, weights, request);
    return cpu::Generate(config_, weights, request, options_);
  }

  Result<std::vector<GenerateResult>> GenerateBatch(
      std::span<const GenerateRequest> requests) override {
    if (pd_) return Engine::GenerateBatch(requests);  // one request at a time through the PD pair
    std::vector<const ModelWeights*> weights;
    for (const GenerateRequest& r : requests) {
      NW_RETURN_IF_ERROR(r.precision.Validate());
      weights.push_back(&WeightsFor(r.precision.weights));
    }
    return cpu::GenerateBatch(config_, weights, requests, options_);
  }

 private:
  const ModelWeights& WeightsFor(NumFormat format) {
    if (format == NumFormat::kFp32) return weights_;
    auto it = requantized_.find(format);
    if (it == requantized_.end()) {
      it = requantized_
               .emplace(format, std::make_unique<ModelWeights>(RequantizeWeights(weights_, format)))
               .first;
    }
    return *it->second;
  }

  ModelConfig config_;
  Tokenizer tokenizer_;
  ModelWeights weights_;
  std::string digest_;
  std::string backend_;
  cpu::BackendOptions options_;
  bool pd_ = false;
  std::map<NumFormat, std::unique_ptr<ModelWeights>> requantized_;
};

Result<cpu::BackendOptions> BackendFor(const std::string& name) {
  if (name == parallel::kCpuPdBackend) return cpu::BackendOptions{};  // both sides in GeneratePd
  auto options = cpu::CpuBackendOptions(name);
  if (!options.ok()) {
    std::string names;
    for (const std::string& b : AvailableBackends()) names += (names.empty() ? "" : ", ") + b;
    return Status::Unsupported("backend '" + name + "' is not available in this build (have " +
                               names + ")");
  }
  return options;
}

}  // namespace

Result<std::vector<GenerateResult>> Engine::GenerateBatch(
    std::span<const GenerateRequest> requests) {
  std::vector<GenerateResult> results;
  for (const GenerateRequest& r : requests) {
    NW_ASSIGN_OR_RETURN(GenerateResult one, Generate(r));
    results.push_back(std::move(one));
  }
  return results;
}

std::vector<std::string> AvailableBackends() {
  return {"cpu", "cpu-paged", parallel::kCpuPdBackend};
}

Result<std::unique_ptr<Engine>> CreateEngine(ModelConfig config, Tokenizer tokenizer,
                                             ModelWeights weights, std::string model_digest,
                                             const EngineOptions& options) {
  NW_ASSIGN_OR_RETURN(cpu::BackendOptions backend, BackendFor(options.backend));
  NW_RETURN_IF_ERROR(config.Validate());
  NW_RETURN_IF_ERROR(cpu::ValidateWeights(config, weights));
  std::unique_ptr<Engine> engine =
      std::make_unique<CpuEngine>(std::move(config), std::move(tokenizer), std::move(weights),
                                  std::move(model_digest), options.backend, backend);
  return engine;
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
  NW_RETURN_IF_ERROR(BackendFor(options.backend).status());
  NW_ASSIGN_OR_RETURN(LoadedModel m, LoadModelFolder(model_dir));
  auto engine = CreateEngine(std::move(m.config), std::move(m.tokenizer), std::move(m.weights),
                             m.files.digest, options);
  if (!engine.ok()) return engine.status().WithContext(m.files.dir.string());
  return engine;
}

}  // namespace nw
