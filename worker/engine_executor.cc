#include "worker/engine_executor.h"

#include <algorithm>
#include <chrono>

#include "common/stopwatch.h"
#include "engine/backend_catalog.h"
#include "engine/text/tokenizer.h"
#include "task/job_prompt.h"
#include "task/scoring.h"

namespace nw {

EngineExecutor::EngineExecutor(EngineExecutorOptions options) : options_(std::move(options)) {
  if (options_.backends.empty()) options_.backends = AvailableBackends();
  if (options_.max_loaded_engines < 1) options_.max_loaded_engines = 1;
}

nlohmann::json EngineExecutor::Capabilities() const {
  // The device kind of what it advertises (a GPU worker's registration names the GPU itself).
  std::string device = "cpu";
  for (const std::string& b : options_.backends) {
    const BackendInfo* info = FindBackend(b);
    if (info != nullptr && info->device != DeviceKind::kCpu) device = DeviceKindName(info->device);
  }
  return nlohmann::json{
      {"backends", options_.backends}, {"device", device}, {"engine_version", kEngineVersion}};
}

std::string EngineExecutor::DeviceFor(const JobSpec& spec) const {
  auto it = engines_.find(std::make_pair(spec.model_dir, spec.backend));
  if (it != engines_.end()) return it->second.first->device();
  const BackendInfo* info = FindBackend(spec.backend);
  return std::string(DeviceKindName(info != nullptr ? info->device : DeviceKind::kCpu));
}

Status EngineExecutor::SelectDevice(const std::string& backend) const {
  if (options_.gpu < 0) return Status::Ok();
  const BackendInfo* info = FindBackend(backend);
  if (info != nullptr && info->device == DeviceKind::kCuda) return UseCudaDevice(options_.gpu);
  return Status::Ok();
}

Result<Engine*> EngineExecutor::EngineFor(const std::string& model_dir,
                                          const std::string& backend) {
  auto key = std::make_pair(model_dir, backend);
  auto it = engines_.find(key);
  if (it == engines_.end()) {
    if (static_cast<int>(engines_.size()) >= options_.max_loaded_engines) {
      auto lru = std::min_element(
          engines_.begin(), engines_.end(),
          [](const auto& a, const auto& b) { return a.second.second < b.second.second; });
      engines_.erase(lru);
    }
    EngineOptions eo;
    eo.backend = backend;
    NW_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, LoadEngine(model_dir, eo));
    it = engines_.emplace(key, std::make_pair(std::move(engine), int64_t{0})).first;
  }
  it->second.second = ++use_counter_;
  return it->second.first.get();
}

Status EngineExecutor::Preload(const std::string& model_dir, const std::string& backend) {
  Status st = SelectDevice(backend);
  if (st.ok()) st = EngineFor(model_dir, backend).status();
  if (st.ok()) return st;
  return st.WithContext("preloading the " + backend + " engine of " + model_dir);
}

ProbeSummary SummarizeProbe(const IndexerProbe& probe, int64_t last_prompt_position) {
  ProbeSummary s;
  s.layer = probe.layer;
  s.topk = probe.topk;
  s.positions = static_cast<int>(probe.positions.size());
  s.ranks.assign(probe.needle_rank.begin(), probe.needle_rank.end());
  std::vector<int32_t> visible;
  int in_topk = 0;
  for (size_t i = 0; i < probe.positions.size(); ++i) {
    const int32_t r = i < probe.needle_rank.size() ? probe.needle_rank[i] : -1;
    if (r >= 0) visible.push_back(r);
    if (i < probe.in_topk.size() && probe.in_topk[i]) ++in_topk;
    if (probe.positions[i] == last_prompt_position) {
      s.in_topk_last = i < probe.in_topk.size() && probe.in_topk[i] != 0;
      if (!probe.topk_sets.empty() && probe.topk > 0) {
        const auto begin = probe.topk_sets.begin() + static_cast<int64_t>(i) * probe.topk;
        s.topk_last.assign(begin, begin + probe.topk);
      }
    }
  }
  if (!visible.empty()) {
    std::sort(visible.begin(), visible.end());
    s.needle_rank_min = visible.front();
    const size_t n = visible.size();
    s.needle_rank_median = n % 2 ? visible[n / 2] : 0.5 * (visible[n / 2 - 1] + visible[n / 2]);
  }
  s.in_topk_fraction = probe.positions.empty() ? 0.0 : double(in_topk) / probe.positions.size();
  return s;
}

Result<JobResult> EngineExecutor::Run(const JobSpec& spec, const std::string& key, int attempt) {
  const auto t0 = std::chrono::steady_clock::now();
  NW_RETURN_IF_ERROR(SelectDevice(spec.backend));
  NW_ASSIGN_OR_RETURN(Engine * engine, EngineFor(spec.model_dir, spec.backend));
  if (engine->model_digest() != spec.model_digest) {
    return Status::FailedPrecondition(
        "model files in " + spec.model_dir + " changed since the campaign was expanded (digest " +
        engine->model_digest().substr(0, 12) + ", job expects " + spec.model_digest.substr(0, 12) +
        "); run the campaign again to expand new jobs");
  }
  if (spec.probe && engine->config().num_indexer_layers() == 0) {
    // Probes read the indexers; `nw validate` refuses this, a submitted job may still ask.
    return Status::InvalidArgument("job.probe: the model in " + spec.model_dir +
                                   " has no layer with an indexer to probe (compress_ratios "
                                   "has no 4)");
  }
  NW_ASSIGN_OR_RETURN(NiahPrompt prompt, BuildJobPrompt(engine->tokenizer(), spec));

  GenerateRequest req;
  req.prompt = prompt.tokens;
  req.max_new_tokens = spec.max_new_tokens;
  if (engine->config().eos_token_id >= 0) req.stop_tokens.push_back(engine->config().eos_token_id);
  req.index_topk = spec.topk;
  req.precision = spec.precision;
  if (Result<Fault> fault = ParseFault(spec.fault); fault.ok()) {
    req.fault = *fault;
  } else {
    return fault.status().WithContext("job.fault");
  }
  // The answer as greedy decoding writes it when the needle is found: a speed hint only
  // (engine/generate.h, greedy drafts): a found needle's answer is checked in one step.
  req.draft = engine->tokenizer().Encode(" " + prompt.expected);
  if (engine->config().eos_token_id >= 0) req.draft.push_back(engine->config().eos_token_id);
  if (spec.probe) {
    ProbeRequest pr;
    pr.needle_begin = prompt.needle_begin;
    pr.needle_end = prompt.needle_end;
    pr.query_begin = prompt.question_begin;
    pr.keep_topk_sets = true;
    req.probe = pr;
  }
  NW_ASSIGN_OR_RETURN(GenerateResult gen, engine->Generate(req));

  JobResult r;
  r.job_key = key;
  r.attempt = attempt;
  std::vector<int32_t> text_tokens = gen.tokens;
  if (gen.stopped && !text_tokens.empty()) text_tokens.pop_back();  // drop the stop token
  r.generated_text = engine->tokenizer().Decode(text_tokens);
  r.expected = prompt.expected;
  r.outcome = ScoreAnswer({r.generated_text, r.expected, gen.stopped});
  r.needle_token_offset = prompt.needle_begin;
  r.prompt_hash = prompt.prompt_hash;
  r.prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
  r.generated_tokens = static_cast<int64_t>(gen.tokens.size());
  r.prefill_ms = gen.prefill_ms;
  r.decode_ms = gen.decode_ms;
  r.device = engine->device();
  r.engine_version = kEngineVersion;
  const int64_t last_pos = static_cast<int64_t>(prompt.tokens.size()) - 1;
  for (const IndexerProbe& p : gen.probes) r.probes.push_back(SummarizeProbe(p, last_pos));
  r.total_ms = MsSince(t0);
  return r;
}

JobResult EngineExecutor::Execute(const JobSpec& spec, const std::string& key, int attempt) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<JobResult> r = Run(spec, key, attempt);
  if (r.ok()) {
    r->worker_id = options_.worker_id;
    return *std::move(r);
  }
  JobResult err;
  err.job_key = key;
  err.attempt = attempt;
  err.outcome = r.status().code() == StatusCode::kDeadlineExceeded ? Outcome::kTimeout
                                                                   : Outcome::kEngineError;
  err.error_code = std::string(StatusCodeName(r.status().code()));
  err.error_message = r.status().message();
  err.retryable = IsRetryable(r.status().code());
  err.worker_id = options_.worker_id;
  err.device = DeviceFor(spec);
  err.engine_version = kEngineVersion;
  err.total_ms = MsSince(t0);
  return err;
}

}  // namespace nw
