#include "engine/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/stopwatch.h"
#include "engine/checkpoint/loader.h"
#include "engine/cpu/sequence.h"
#include "engine/cuda/cuda_sequence.h"
#include "engine/cuda/device_model.h"
#include "engine/generate.h"
#include "engine/parallel/pd_transfer.h"
#include "kernels/cuda/common.h"

namespace nw::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(const BackendInfo& info, const ModelConfig& config,
              std::shared_ptr<const ModelWeights> weights, Stream stream, std::string device,
              std::shared_ptr<SequencePool> pool)
      : info_(info),
        config_(config),
        weights_(std::move(weights)),
        stream_(std::move(stream)),
        device_(std::move(device)),
        pool_(std::move(pool)) {}

  const BackendInfo& info() const override { return info_; }
  const ModelConfig& config() const override { return config_; }
  std::string device() const override { return device_; }

  Result<std::unique_ptr<BackendSequence>> NewSequence(const SequenceSpec& spec) override {
    if (info_.disaggregated) {
      return Status::Unsupported("backend " + std::string(info_.name) +
                                 " runs whole requests (prefill and decode instances)");
    }
    NW_ASSIGN_OR_RETURN(std::unique_ptr<CudaSequence> seq,
                        NewCudaSequence(spec, info_.layout, info_.prefill_chunk));
    return std::unique_ptr<BackendSequence>(std::move(seq));
  }

  int64_t state_bytes_per_token(const PrecisionProfile& precision) const override {
    (void)precision;  // stored as fp32 whatever the profile rounds to
    return StateBytesPerToken(config_);
  }

  std::optional<Result<GenerateResult>> GenerateWhole(const GenerateRequest& request) override {
    if (!info_.disaggregated) return std::nullopt;
    return GeneratePd(request);
  }

 private:
  Result<std::unique_ptr<CudaSequence>> NewCudaSequence(const SequenceSpec& spec, KvLayout layout,
                                                        int64_t chunk) {
    NW_RETURN_IF_ERROR(spec.precision.Validate());
    // A fault the backend does not replay is refused here too, for callers that reach a sequence
    // without engine/generate.h's check.
    NW_RETURN_IF_ERROR(CheckBackendFault(info_, spec.fault));
    NW_RETURN_IF_ERROR(CheckBackendTrace(info_, spec.trace != nullptr));
    // A contiguous sequence of the last request's shape takes over its state (buffers, graphs).
    const bool pooled = layout == KvLayout::kContiguous && pool_ != nullptr;
    if (pooled) {
      if (std::unique_ptr<CudaSequence> seq = CudaSequence::Reuse(pool_, layout, chunk, spec)) {
        return seq;
      }
    }
    NW_RETURN_IF_ERROR(CudaSequence::CheckFits(config_, chunk, spec));
    NW_ASSIGN_OR_RETURN(const DeviceModel* model, ModelFor(spec.precision.weights));
    NW_ASSIGN_OR_RETURN(const DeviceRope* rope, RopeFor(spec.max_tokens));
    return CudaSequence::Create(config_, *model, *rope, layout, chunk, spec, stream_.get(),
                                pooled ? pool_ : nullptr);
  }

  // RoPE tables with at least `rows` positions, uploaded once (65,536 positions or the request's,
  // at most max_position_embeddings) and grown (to at least twice the last size, at most
  // max_position_embeddings) when a longer request comes. Older tables stay until the backend goes:
  // a sequence alive in the same batch may still read them.
  Result<const DeviceRope*> RopeFor(int64_t rows) {
    if (!ropes_.empty() && ropes_.back()->rows >= rows) return ropes_.back().get();
    int64_t want = std::max<int64_t>(rows, ropes_.empty() ? 65536 : 2 * ropes_.back()->rows);
    if (config_.max_position_embeddings > 0) {
      want = std::max<int64_t>(rows, std::min<int64_t>(want, config_.max_position_embeddings));
    }
    Result<DeviceRope> up = DeviceRope::Upload(config_, want);
    if (!up.ok()) {
      return Status::ResourceExhausted("uploading RoPE tables for " + std::to_string(want) +
                                       " positions to " + device_ +
                                       " failed: " + up.status().message());
    }
    ropes_.push_back(std::make_unique<DeviceRope>(std::move(up).value()));
    return ropes_.back().get();
  }

  Result<const DeviceModel*> ModelFor(NumFormat format) {
    auto it = models_.find(format);
    if (it == models_.end()) {
      // The bf16 and fp8 weight formats come with bf16 activations in every named profile: their
      // linears run on tensor cores (bf16 copies); fp32 weights keep the exact kernels only.
      Result<DeviceModel> up =
          format == NumFormat::kFp32
              ? DeviceModel::Upload(config_, *weights_)
              : DeviceModel::Upload(config_, RequantizeWeights(*weights_, format), true);
      if (!up.ok()) {
        return Status::ResourceExhausted("uploading the weights to " + device_ +
                                         " failed: " + up.status().message());
      }
      it = models_.emplace(format, std::make_unique<DeviceModel>(std::move(up).value())).first;
    }
    return it->second.get();
  }

  // Prefill instance -> PD transfer buffer -> fresh paged decode instance, on this GPU.
  Result<GenerateResult> GeneratePd(const GenerateRequest& request) {
    NW_ASSIGN_OR_RETURN(SequenceSpec spec, CheckRequest(config_, request));
    GenerateResult result;
    std::vector<float> logits;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<uint8_t> transfer;
    std::vector<IndexerProbe> prefill_probes;
    {
      NW_ASSIGN_OR_RETURN(std::unique_ptr<CudaSequence> prefill,
                          NewCudaSequence(spec, KvLayout::kContiguous, 0));
      NW_RETURN_IF_ERROR(prefill->Prefill(request.prompt, &logits));
      NW_ASSIGN_OR_RETURN(cpu::SequenceState state, prefill->ExportState());
      parallel::ApplyHandoffFault(spec.fault, &state);
      transfer = parallel::SerializeDecodeState(config_, state);
      prefill_probes = prefill->probes();
    }
    result.prefill_ms = MsSince(t0);
    const auto t1 = std::chrono::steady_clock::now();
    NW_ASSIGN_OR_RETURN(std::unique_ptr<CudaSequence> decode,
                        NewCudaSequence(spec, KvLayout::kPaged, 0));
    auto state = parallel::DeserializeDecodeState(config_, transfer);
    if (!state.ok()) return state.status().WithContext("PD transfer");
    NW_RETURN_IF_ERROR(decode->ImportState(*state).WithContext("PD transfer"));
    decode->PrependProbes(prefill_probes);
    NW_RETURN_IF_ERROR(DecodeGreedy(config_, request, decode.get(), &logits, &result));
    result.decode_ms = MsSince(t1);
    result.probes = decode->probes();
    return result;
  }

  const BackendInfo& info_;
  ModelConfig config_;
  std::shared_ptr<const ModelWeights> weights_;
  Stream stream_;
  std::string device_;
  std::map<NumFormat, std::unique_ptr<DeviceModel>> models_;
  std::vector<std::unique_ptr<DeviceRope>> ropes_;
  // Idle sequence states (they name models_, ropes_ and stream_: declared last, released first).
  std::shared_ptr<SequencePool> pool_;
};

// The sequence pool a backend keeps: one idle state. NW_CUDA_REUSE=0 turns reuse off (for A/B
// runs). NW_CUDA_GRAPHS=1 lets each reused state replay up to 32 graphs: off by default, because
// on the H200 graphs paid only for one slot (2K bf16 jobs 265.6 -> 322.7 needles/s) and cost with
// several (8 slots: 850.4 -> 583.0; bench/results/h200-2026-12-03-s18-c-ab.log).
std::shared_ptr<SequencePool> PoolFromEnvironment() {
  auto is = [](const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string(v) == value;
  };
  if (is("NW_CUDA_REUSE", "0")) return nullptr;
  return std::make_shared<SequencePool>(1, is("NW_CUDA_GRAPHS", "1") ? 32 : 0);
}

}  // namespace

bool CudaBackendUsable() { return HasCudaDevice(); }

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Status UseDevice(int index) {
  const int n = DeviceCount();
  if (index < 0 || index >= n) {
    return Status::InvalidArgument("CUDA device " + std::to_string(index) + " is not one of the " +
                                   std::to_string(n) + " visible here");
  }
  NW_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  return Status::Ok();
}

Result<std::string> PciBusId(int index) {
  const int n = DeviceCount();
  if (index < 0 || index >= n) {
    return Status::InvalidArgument("CUDA device " + std::to_string(index) + " is not one of the " +
                                   std::to_string(n) + " visible here");
  }
  char id[32] = {};  // "0000:19:00.0" and the NUL: 13 bytes; the runtime asks for at least 13
  NW_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(id, sizeof(id), index));
  return std::string(id);
}

Result<std::unique_ptr<Backend>> CreateCudaBackend(const BackendInfo& info,
                                                   const ModelConfig& config,
                                                   std::shared_ptr<const ModelWeights> weights) {
  if (info.device != DeviceKind::kCuda) {
    return Status::InvalidArgument("backend " + std::string(info.name) + " is not a CUDA backend");
  }
  // A hostile or mismatched checkpoint is refused before anything is uploaded.
  NW_RETURN_IF_ERROR(config.Validate());
  if (weights == nullptr) return Status::InvalidArgument("no weights");
  NW_RETURN_IF_ERROR(cpu::ValidateWeights(config, *weights));
  if (!HasCudaDevice()) {
    return Status::Unsupported("backend " + std::string(info.name) +
                               " needs a GPU, and this machine has no usable CUDA device");
  }
  int dev = 0;
  NW_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  NW_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, dev));
  NW_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  // Sequences allocate in stream order from the default pool; keep what they free for the next.
  NW_RETURN_IF_ERROR(RetainPoolMemory());
  return std::unique_ptr<Backend>(
      std::make_unique<CudaBackend>(info, config, std::move(weights), std::move(stream),
                                    std::string(prop.name), PoolFromEnvironment()));
}

}  // namespace nw::cuda
