// Engine: needlework's DeepSeek-V4 inference engine, the API the worker calls.
//
// An Engine owns one loaded model (config, tokenizer, weights) on one backend (backend.h, named
// in the catalog backend_catalog.h). Generate() runs a prompt through prefill and greedy step
// decode, optionally capturing indexer probes; GenerateBatch() runs several prompts with their
// decode steps batched. Both are engine/generate.h over the backend.
// Thread-safety: an Engine is used by one thread at a time (one engine per worker slot); Load()
// is safe to call concurrently for different engines.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/checkpoint/config.h"
#include "engine/checkpoint/model_files.h"
#include "engine/checkpoint/weights.h"
#include "engine/precision.h"
#include "engine/text/tokenizer.h"
#include "engine/types.h"
#include "engine/version.h"  // kEngineVersion

namespace nw {

class Tokenizer;

struct EngineOptions {
  std::string backend = "cpu";  // a catalog name (backend_catalog.h). "cpu": contiguous KV,
                                // the whole prompt in one pass (ragged prefill); "cpu-paged":
                                // paged KV, prefill in chunks of 256 tokens through the paged
                                // cache and indexer, like decode; "cpu-pd": prefill on one
                                // instance, the decode state sent as a transfer buffer to a
                                // paged instance that decodes (engine/parallel/pd_generate.h).
                                // The CPU ones give bit-identical results
                                // (engine/cpu/sequence.h); cuda* need a CUDA build and a GPU.
};

/// The façade over one Backend (backend.h): a loaded model (config, tokenizer, digest) bound to
/// a backend, with requests run by engine/generate.h (the same code on every backend).
class Engine {
 public:
  Engine(Tokenizer tokenizer, std::string model_digest, std::unique_ptr<Backend> backend);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& config() const { return backend_->config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  /// The catalog name of the backend ("cpu-paged").
  std::string backend() const { return std::string(backend_->info().name); }
  /// Device description for result rows ("cpu", "NVIDIA H200"), from the backend.
  std::string device() const { return backend_->device(); }
  /// sha256 digests of the weights files, tokenizer.json and config.json, combined.
  const std::string& model_digest() const { return digest_; }
  /// The backend itself (step-by-step callers, capacity planning).
  Backend& backend_impl() { return *backend_; }

  Result<GenerateResult> Generate(const GenerateRequest& request);
  /// Runs several requests together; result i is request i's, with the same tokens, stop flag
  /// and probes as Generate(request i). Decode steps run batched through Backend::DecodeBatch
  /// (on the CPU backends one pass over the weights per step for every request;
  /// engine/cpu/batch.h); a backend that runs requests whole (cpu-pd) runs them in turn. An
  /// error in any request fails the call.
  Result<std::vector<GenerateResult>> GenerateBatch(std::span<const GenerateRequest> requests);

 private:
  Tokenizer tokenizer_;
  std::string digest_;
  std::unique_ptr<Backend> backend_;
};

/// A model folder read and checked, not yet bound to a backend: what LoadEngine and `nw serve`
/// both start from. Errors name the file at fault.
struct LoadedModel {
  ModelFiles files;
  ModelConfig config;
  Tokenizer tokenizer;
  ModelWeights weights;
};
Result<LoadedModel> LoadModelFolder(const std::filesystem::path& model_dir);

/// Loads DIR (config.json, model.safetensors or an index, tokenizer.json) on a backend. Errors
/// name the file at fault.
Result<std::unique_ptr<Engine>> LoadEngine(const std::filesystem::path& model_dir,
                                           const EngineOptions& options);

/// Builds an engine from a model already in memory (tests, benchmarks, tools): the config must
/// validate and the weights must match it (every tensor the forward pass reads is checked).
/// `model_digest` is reported as is.
Result<std::unique_ptr<Engine>> CreateEngine(ModelConfig config, Tokenizer tokenizer,
                                             ModelWeights weights, std::string model_digest,
                                             const EngineOptions& options);

/// The catalog backends (backend_catalog.h) this build and machine can run, in catalog order:
/// the CPU ones always; the cuda* ones only in a build with the CUDA backend
/// (NW_HAVE_CUDA_BACKEND) on a machine where it finds a usable GPU.
std::vector<std::string> AvailableBackends();

/// CUDA devices this process can run the cuda* backends on (0 without a CUDA build or a GPU).
int CudaDeviceCount();
/// Makes `index` the calling thread's CUDA device: cuda* engines created and run on this thread
/// afterwards use it. Unsupported without the CUDA backend; InvalidArgument for a bad index.
Status UseCudaDevice(int index);
/// The PCI bus id of CUDA device `index` as cudaDeviceGetPCIBusId writes it ("0000:19:00.0"),
/// which names the same GPU to NVML. Unsupported without the CUDA backend.
Result<std::string> CudaDevicePciBusId(int index);

/// Ok when this build and machine can run backend `name`; InvalidArgument (listing the catalog)
/// for a name the catalog lacks; Unsupported saying why not for a catalog backend that cannot run
/// here (a cuda* one without a CUDA build or without a usable GPU).
Status BackendAvailableHere(const std::string& name);

}  // namespace nw
