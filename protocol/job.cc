#include "protocol/job.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>

#include "common/sha256.h"

namespace nw {
namespace {

using json = nlohmann::json;

// Reads a required field with a clear error ("job.topk: missing" / "must be integer").
template <typename T>
Status Field(const json& j, const char* key, T* out, const char* what) {
  auto it = j.find(key);
  if (it == j.end()) return Status::InvalidArgument(std::string(what) + "." + key + ": missing");
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // A number that does not fit the field is refused, never wrapped into one that does.
      if (!it->is_number_integer()) {
        return Status::InvalidArgument(std::string(what) + "." + key + ": must be an integer");
      }
      const bool fits =
          it->is_number_unsigned()
              ? it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
              : it->template get<int64_t>() >= std::numeric_limits<T>::min() &&
                    it->template get<int64_t>() <= std::numeric_limits<T>::max();
      if (!fits) {
        return Status::InvalidArgument(std::string(what) + "." + key + ": " + it->dump() +
                                       " does not fit the field");
      }
    }
    *out = it->template get<T>();
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string(what) + "." + key + ": wrong type (" + e.what() +
                                   ")");
  }
  return Status::Ok();
}

// Reads an optional field: absent leaves *out as it is.
template <typename T>
Status OptField(const json& j, const char* key, T* out, const char* what) {
  if (!j.contains(key)) return Status::Ok();
  return Field(j, key, out, what);
}

}  // namespace

json HttpSampling::ToJson() const {
  json j = json::object();
  if (temperature) j["temperature"] = *temperature;
  if (top_p) j["top_p"] = *top_p;
  if (top_k) j["top_k"] = *top_k;
  if (seed) j["seed"] = *seed;
  if (min_tokens) j["min_tokens"] = *min_tokens;
  return j;
}

Result<HttpSampling> HttpSampling::FromJson(const json& j, const std::string& where) {
  if (!j.is_object()) return Status::InvalidArgument(where + ": must be an object");
  auto bad = [&](const std::string& key, const std::string& why) {
    return Status::InvalidArgument(where + "." + key + ": " + why);
  };
  HttpSampling s;
  for (const auto& [key, v] : j.items()) {
    if (key == "temperature" || key == "top_p") {
      if (!v.is_number()) return bad(key, "must be a number");
      const double x = v.get<double>();
      if (key == "temperature") {
        if (!std::isfinite(x) || x < 0 || x > 2) return bad(key, "must be in 0..2");
        s.temperature = x;
      } else {
        if (!std::isfinite(x) || x <= 0 || x > 1) return bad(key, "must be in (0, 1]");
        s.top_p = x;
      }
    } else if (key == "top_k" || key == "min_tokens" || key == "seed") {
      if (!v.is_number_integer()) return bad(key, "must be an integer");
      if (v.is_number_unsigned() &&
          v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return bad(key, v.dump() + " does not fit the field");
      }
      const int64_t x = v.get<int64_t>();
      if (key == "seed") {
        if (x < 0) return bad(key, "must be >= 0");
        s.seed = x;
      } else if (key == "top_k") {
        if (x < 1 || x > kMaxSamplingTopK) {
          return bad(key, "must be in 1.." + std::to_string(kMaxSamplingTopK));
        }
        s.top_k = static_cast<int>(x);
      } else {
        if (x < 0 || x > kMaxSamplingMinTokens) {
          return bad(key, "must be in 0.." + std::to_string(kMaxSamplingMinTokens));
        }
        s.min_tokens = static_cast<int>(x);
      }
    } else {
      return bad(key,
                 "unknown sampling parameter (known: temperature, top_p, top_k, seed, "
                 "min_tokens)");
    }
  }
  return s;
}

json StreamTiming::ToJson() const {
  return json{{"ttft_ms", ttft_ms},
              {"tpot_ms", tpot_ms},
              {"itl_p50_ms", itl_p50_ms},
              {"itl_p95_ms", itl_p95_ms},
              {"events", events}};
}

Result<StreamTiming> StreamTiming::FromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("result.stream: must be an object");
  StreamTiming t;
  NW_RETURN_IF_ERROR(Field(j, "ttft_ms", &t.ttft_ms, "result.stream"));
  NW_RETURN_IF_ERROR(Field(j, "tpot_ms", &t.tpot_ms, "result.stream"));
  NW_RETURN_IF_ERROR(Field(j, "itl_p50_ms", &t.itl_p50_ms, "result.stream"));
  NW_RETURN_IF_ERROR(Field(j, "itl_p95_ms", &t.itl_p95_ms, "result.stream"));
  NW_RETURN_IF_ERROR(Field(j, "events", &t.events, "result.stream"));
  return t;
}

json HttpBackendSpec::ToJson() const {
  json j{{"url", url},
         {"model", model},
         {"api", api},
         {"tokenizer", tokenizer},
         {"tokenizer_digest", tokenizer_digest},
         {"engine_params", engine_params},
         {"headers", headers},
         {"api_key_env", api_key_env},
         {"api_key_file", api_key_file},
         {"concurrency", concurrency},
         {"timeout_ms", timeout_ms},
         {"retries", retries},
         {"ready_timeout_ms", ready_timeout_ms},
         {"health_path", health_path},
         {"server_index_topk", server_index_topk}};
  // Only when set, so the JSON of specs that do not use them is as it was.
  if (stream) j["stream"] = true;
  if (!sampling.empty()) j["sampling"] = sampling.ToJson();
  if (!ca_file.empty()) j["ca_file"] = ca_file;
  return j;
}

Result<HttpBackendSpec> HttpBackendSpec::FromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("job.http: must be an object");
  HttpBackendSpec h;
  NW_RETURN_IF_ERROR(Field(j, "url", &h.url, "job.http"));
  NW_RETURN_IF_ERROR(Field(j, "model", &h.model, "job.http"));
  NW_RETURN_IF_ERROR(Field(j, "api", &h.api, "job.http"));
  NW_RETURN_IF_ERROR(Field(j, "tokenizer", &h.tokenizer, "job.http"));
  NW_RETURN_IF_ERROR(Field(j, "tokenizer_digest", &h.tokenizer_digest, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "engine_params", &h.engine_params, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "headers", &h.headers, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "api_key_env", &h.api_key_env, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "api_key_file", &h.api_key_file, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "concurrency", &h.concurrency, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "timeout_ms", &h.timeout_ms, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "retries", &h.retries, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "ready_timeout_ms", &h.ready_timeout_ms, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "health_path", &h.health_path, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "server_index_topk", &h.server_index_topk, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "stream", &h.stream, "job.http"));
  NW_RETURN_IF_ERROR(OptField(j, "ca_file", &h.ca_file, "job.http"));
  if (auto s = j.find("sampling"); s != j.end()) {
    NW_ASSIGN_OR_RETURN(h.sampling, HttpSampling::FromJson(*s, "job.http.sampling"));
  }
  if (h.api != "completions" && h.api != "chat") {
    return Status::InvalidArgument("job.http.api: must be completions or chat, got '" + h.api +
                                   "'");
  }
  return h;
}

json HttpBackendSpec::KeyJson() const {
  json j{{"url", url},
         {"model", model},
         {"api", api},
         {"tokenizer_digest", tokenizer_digest},
         {"engine_params", engine_params}};
  // Only when set: the keys of jobs without them stay what they were. Sampling changes the
  // answers; streaming changes what a result holds (its latency figures).
  if (!sampling.empty()) j["sampling"] = sampling.ToJson();
  if (stream) j["stream"] = true;
  return j;
}

json JobSpec::ToJson() const {
  json j{{"model_dir", model_dir},
         {"model_digest", model_digest},
         {"engine_version", engine_version},
         {"task", task},
         {"haystack", haystack},
         {"context_length", context_length},
         {"needle_position", needle_position},
         {"topk", topk},
         {"precision", precision.ToJson()},
         {"backend", backend},
         {"seed", seed},
         {"trial", trial},
         {"max_new_tokens", max_new_tokens},
         {"probe", probe}};
  if (http) j["http"] = http->ToJson();
  if (fault != "none") j["fault"] = fault;
  return j;
}

Result<JobSpec> JobSpec::FromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("job: must be an object");
  JobSpec s;
  NW_RETURN_IF_ERROR(Field(j, "model_dir", &s.model_dir, "job"));
  NW_RETURN_IF_ERROR(Field(j, "model_digest", &s.model_digest, "job"));
  NW_RETURN_IF_ERROR(Field(j, "engine_version", &s.engine_version, "job"));
  NW_RETURN_IF_ERROR(Field(j, "task", &s.task, "job"));
  NW_RETURN_IF_ERROR(Field(j, "haystack", &s.haystack, "job"));
  NW_RETURN_IF_ERROR(Field(j, "context_length", &s.context_length, "job"));
  NW_RETURN_IF_ERROR(Field(j, "needle_position", &s.needle_position, "job"));
  NW_RETURN_IF_ERROR(Field(j, "topk", &s.topk, "job"));
  NW_RETURN_IF_ERROR(Field(j, "backend", &s.backend, "job"));
  NW_RETURN_IF_ERROR(Field(j, "seed", &s.seed, "job"));
  NW_RETURN_IF_ERROR(Field(j, "trial", &s.trial, "job"));
  NW_RETURN_IF_ERROR(Field(j, "max_new_tokens", &s.max_new_tokens, "job"));
  NW_RETURN_IF_ERROR(Field(j, "probe", &s.probe, "job"));
  auto it = j.find("precision");
  if (it == j.end()) return Status::InvalidArgument("job.precision: missing");
  auto p = PrecisionProfile::FromJson(*it);
  if (!p.ok()) return p.status().WithContext("job.precision");
  s.precision = *p;
  if (auto h = j.find("http"); h != j.end()) {
    NW_ASSIGN_OR_RETURN(s.http, HttpBackendSpec::FromJson(*h));
  }
  if (s.backend == "http" && !s.http) {
    return Status::InvalidArgument("job.http: missing (backend http needs its settings)");
  }
  if (auto f = j.find("fault"); f != j.end()) {
    if (!f->is_string() || f->get<std::string>().empty() || f->get<std::string>() == "none") {
      return Status::InvalidArgument(
          "job.fault: must be a fault name other than \"none\" (absent means none)");
    }
    s.fault = f->get<std::string>();
  }
  return s;
}

std::string JobSpec::Key() const {
  json j = ToJson();
  j.erase("model_dir");
  if (http) j["http"] = http->KeyJson();
  json keyed{{"v", kJobSchemaVersion}, {"job", j}};
  return Sha256Hex(keyed.dump());
}

uint64_t JobSpec::HaystackSeed() const {
  // The prompt's design point only: never the axes a campaign compares (model, engine, top-k,
  // precision, backend, http settings, probes, generation length), so that two configurations
  // compared with each other read the same prompts (with the same tokenizer) and differ only in
  // the thing under test.
  const json full = ToJson();
  json point = json::object();
  for (const char* k : {"task", "haystack", "context_length", "needle_position", "seed", "trial"}) {
    point[k] = full.at(k);
  }
  const std::string h = Sha256Hex(json{{"v", kJobSchemaVersion}, {"prompt", point}}.dump());
  uint64_t out = 0;
  for (int i = 0; i < 16; ++i) {
    const char c = h[static_cast<size_t>(i)];
    out = (out << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return out;
}

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kMiss:
      return "miss";
    case Outcome::kTruncated:
      return "truncated";
    case Outcome::kEmpty:
      return "empty";
    case Outcome::kEngineError:
      return "engine_error";
    case Outcome::kTimeout:
      return "timeout";
  }
  return "engine_error";
}

Result<Outcome> ParseOutcome(std::string_view name) {
  for (Outcome o : {Outcome::kPass, Outcome::kMiss, Outcome::kTruncated, Outcome::kEmpty,
                    Outcome::kEngineError, Outcome::kTimeout}) {
    if (OutcomeName(o) == name) return o;
  }
  return Status::InvalidArgument("unknown outcome '" + std::string(name) + "'");
}

namespace {

json ProbeToJson(const ProbeSummary& p) {
  return json{{"layer", p.layer},
              {"positions", p.positions},
              {"needle_rank_min", p.needle_rank_min},
              {"needle_rank_median", p.needle_rank_median},
              {"in_topk_fraction", p.in_topk_fraction},
              {"in_topk_last", p.in_topk_last},
              {"topk", p.topk},
              {"ranks", p.ranks},
              {"topk_last", p.topk_last}};
}

Result<ProbeSummary> ProbeFromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("result.probes[]: must be an object");
  ProbeSummary p;
  NW_RETURN_IF_ERROR(Field(j, "layer", &p.layer, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "positions", &p.positions, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "needle_rank_min", &p.needle_rank_min, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "needle_rank_median", &p.needle_rank_median, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "in_topk_fraction", &p.in_topk_fraction, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "in_topk_last", &p.in_topk_last, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "topk", &p.topk, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "ranks", &p.ranks, "probe"));
  NW_RETURN_IF_ERROR(Field(j, "topk_last", &p.topk_last, "probe"));
  return p;
}

}  // namespace

json JobResult::ToJson() const {
  json probes_j = json::array();
  for (const auto& p : probes) probes_j.push_back(ProbeToJson(p));
  json j{{"job_key", job_key},
         {"attempt", attempt},
         {"outcome", OutcomeName(outcome)},
         {"generated_text", generated_text},
         {"expected", expected},
         {"needle_token_offset", needle_token_offset},
         {"prompt_hash", prompt_hash},
         {"prompt_tokens", prompt_tokens},
         {"generated_tokens", generated_tokens},
         {"prefill_ms", prefill_ms},
         {"decode_ms", decode_ms},
         {"total_ms", total_ms},
         {"worker_id", worker_id},
         {"device", device},
         {"engine_version", engine_version},
         {"error_code", error_code},
         {"error_message", error_message},
         {"retryable", retryable},
         {"probes", probes_j}};
  if (stream) j["stream"] = stream->ToJson();
  if (gpu_busy) j["gpu_busy"] = *gpu_busy;
  return j;
}

Status ModelProbeLayers::Check(int layer) const {
  if (layer < 0 || layer >= n_layers) {
    return Status::InvalidArgument("layer " + std::to_string(layer) +
                                   " does not exist in the model (" + std::to_string(n_layers) +
                                   " layers)");
  }
  if (!std::binary_search(indexer_layers.begin(), indexer_layers.end(), layer)) {
    std::string list;
    for (int l : indexer_layers) list += (list.empty() ? "" : ", ") + std::to_string(l);
    return Status::InvalidArgument(
        "layer " + std::to_string(layer) +
        " has no indexer in the model (indexer layers: " + (list.empty() ? "none" : list) + ")");
  }
  return Status::Ok();
}

Status CheckResultBounds(const JobResult& r, const JobSpec* spec, const ModelProbeLayers* layers) {
  auto bad = [](const std::string& field, const std::string& why) {
    return Status::InvalidArgument("result." + field + ": " + why);
  };
  auto size_ok = [&](const std::string& field, const std::string& v, size_t max) {
    return v.size() <= max ? Status::Ok()
                           : bad(field, std::to_string(v.size()) + " bytes, over the " +
                                            std::to_string(max) + "-byte limit");
  };
  NW_RETURN_IF_ERROR(size_ok("job_key", r.job_key, kMaxResultFieldBytes));
  NW_RETURN_IF_ERROR(size_ok("generated_text", r.generated_text, kMaxResultTextBytes));
  NW_RETURN_IF_ERROR(size_ok("error_message", r.error_message, kMaxResultTextBytes));
  NW_RETURN_IF_ERROR(size_ok("expected", r.expected, kMaxResultTextBytes));
  NW_RETURN_IF_ERROR(size_ok("prompt_hash", r.prompt_hash, kMaxResultFieldBytes));
  NW_RETURN_IF_ERROR(size_ok("worker_id", r.worker_id, kMaxResultFieldBytes));
  NW_RETURN_IF_ERROR(size_ok("device", r.device, kMaxResultFieldBytes));
  NW_RETURN_IF_ERROR(size_ok("engine_version", r.engine_version, kMaxResultFieldBytes));
  NW_RETURN_IF_ERROR(size_ok("error_code", r.error_code, kMaxResultFieldBytes));
  if (r.attempt < 1) return bad("attempt", "must be >= 1");
  if (!r.error_code.empty() && !StatusCodeFromName(r.error_code).has_value()) {
    return bad("error_code", "'" + r.error_code + "' is not a status code name");
  }
  if (r.needle_token_offset < -1 || r.needle_token_offset > kMaxResultTokens) {
    return bad("needle_token_offset", "must be -1 or a token offset");
  }
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"prompt_tokens", r.prompt_tokens},
                                {"generated_tokens", r.generated_tokens}}) {
    if (v < 0 || v > kMaxResultTokens) {
      return bad(name, std::to_string(v) + " is outside 0.." + std::to_string(kMaxResultTokens));
    }
  }
  for (const auto& [name, v] : {std::pair<const char*, double>{"prefill_ms", r.prefill_ms},
                                {"decode_ms", r.decode_ms},
                                {"total_ms", r.total_ms}}) {
    if (!std::isfinite(v) || v < 0 || v > kMaxResultMs) {
      return bad(name, "must be a finite number of milliseconds in 0..1e10");
    }
  }
  if (r.stream) {
    for (const auto& [name, v] :
         {std::pair<const char*, double>{"stream.ttft_ms", r.stream->ttft_ms},
          {"stream.tpot_ms", r.stream->tpot_ms},
          {"stream.itl_p50_ms", r.stream->itl_p50_ms},
          {"stream.itl_p95_ms", r.stream->itl_p95_ms}}) {
      if (!std::isfinite(v) || v < 0 || v > kMaxResultMs) {
        return bad(name, "must be a finite number of milliseconds in 0..1e10");
      }
    }
    if (r.stream->events < 0 || r.stream->events > kMaxResultTokens) {
      return bad("stream.events", "must be a count");
    }
  }
  if (r.gpu_busy && (!std::isfinite(*r.gpu_busy) || *r.gpu_busy < 0 || *r.gpu_busy > 1)) {
    return bad("gpu_busy", "must be a fraction in [0, 1]");
  }
  if (r.probes.size() > kMaxProbes) {
    return bad("probes", std::to_string(r.probes.size()) + " probes, over the limit of " +
                             std::to_string(kMaxProbes));
  }
  if (spec != nullptr && !r.probes.empty() && !spec->probe) {
    return bad("probes", "the job did not ask for probes");
  }
  size_t entries = 0;
  std::vector<bool> seen_layer(kMaxProbeLayer + 1, false);
  for (size_t i = 0; i < r.probes.size(); ++i) {
    const ProbeSummary& p = r.probes[i];
    const std::string f = "probes[" + std::to_string(i) + "].";
    if (p.layer < 0 || p.layer > kMaxProbeLayer) {
      return bad(f + "layer", std::to_string(p.layer) + " is not a layer index (0.." +
                                  std::to_string(kMaxProbeLayer) + ")");
    }
    if (seen_layer[static_cast<size_t>(p.layer)]) {
      return bad(f + "layer", "layer " + std::to_string(p.layer) + " is probed twice");
    }
    seen_layer[static_cast<size_t>(p.layer)] = true;
    if (layers != nullptr) {
      if (Status exists = layers->Check(p.layer); !exists.ok()) {
        return bad(f + "layer", exists.message());
      }
    }
    if (p.positions < 0) return bad(f + "positions", "must be >= 0");
    if (spec != nullptr && spec->context_length > 0 && p.positions > 2 * spec->context_length) {
      return bad(f + "positions", std::to_string(p.positions) + " positions for a prompt of " +
                                      std::to_string(spec->context_length) + " tokens");
    }
    if (p.topk < 0) return bad(f + "topk", "must be >= 0");
    if (p.needle_rank_min < -1) return bad(f + "needle_rank_min", "must be >= -1");
    if (!std::isfinite(p.needle_rank_median) || p.needle_rank_median < -1 ||
        (p.positions > 0 && p.needle_rank_median > kMaxResultTokens)) {
      return bad(f + "needle_rank_median", "must be a finite rank >= -1");
    }
    if (!std::isfinite(p.in_topk_fraction) || p.in_topk_fraction < 0 || p.in_topk_fraction > 1) {
      return bad(f + "in_topk_fraction", "must be in [0, 1]");
    }
    if (p.ranks.size() > static_cast<size_t>(p.positions)) {
      return bad(f + "ranks", std::to_string(p.ranks.size()) + " ranks for " +
                                  std::to_string(p.positions) + " positions");
    }
    for (int32_t rank : p.ranks) {
      if (rank < -1) return bad(f + "ranks", "a rank below -1");
    }
    if (p.topk_last.size() > static_cast<size_t>(p.topk)) {
      return bad(f + "topk_last", std::to_string(p.topk_last.size()) + " entries for top-k " +
                                      std::to_string(p.topk));
    }
    entries += p.ranks.size() + p.topk_last.size();
    if (entries > kMaxProbeEntries) {
      return bad("probes", "more than " + std::to_string(kMaxProbeEntries) + " entries in all");
    }
  }
  return Status::Ok();
}

Result<JobResult> JobResult::FromJson(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("result: must be an object");
  JobResult r;
  std::string outcome;
  NW_RETURN_IF_ERROR(Field(j, "job_key", &r.job_key, "result"));
  NW_RETURN_IF_ERROR(Field(j, "attempt", &r.attempt, "result"));
  NW_RETURN_IF_ERROR(Field(j, "outcome", &outcome, "result"));
  NW_ASSIGN_OR_RETURN(r.outcome, ParseOutcome(outcome));
  NW_RETURN_IF_ERROR(Field(j, "generated_text", &r.generated_text, "result"));
  NW_RETURN_IF_ERROR(Field(j, "expected", &r.expected, "result"));
  NW_RETURN_IF_ERROR(Field(j, "needle_token_offset", &r.needle_token_offset, "result"));
  NW_RETURN_IF_ERROR(Field(j, "prompt_hash", &r.prompt_hash, "result"));
  NW_RETURN_IF_ERROR(Field(j, "prompt_tokens", &r.prompt_tokens, "result"));
  NW_RETURN_IF_ERROR(Field(j, "generated_tokens", &r.generated_tokens, "result"));
  NW_RETURN_IF_ERROR(Field(j, "prefill_ms", &r.prefill_ms, "result"));
  NW_RETURN_IF_ERROR(Field(j, "decode_ms", &r.decode_ms, "result"));
  NW_RETURN_IF_ERROR(Field(j, "total_ms", &r.total_ms, "result"));
  NW_RETURN_IF_ERROR(Field(j, "worker_id", &r.worker_id, "result"));
  NW_RETURN_IF_ERROR(Field(j, "device", &r.device, "result"));
  NW_RETURN_IF_ERROR(Field(j, "engine_version", &r.engine_version, "result"));
  NW_RETURN_IF_ERROR(Field(j, "error_code", &r.error_code, "result"));
  NW_RETURN_IF_ERROR(Field(j, "error_message", &r.error_message, "result"));
  NW_RETURN_IF_ERROR(Field(j, "retryable", &r.retryable, "result"));
  auto it = j.find("probes");
  if (it == j.end() || !it->is_array()) {
    return Status::InvalidArgument("result.probes: missing or not an array");
  }
  for (const auto& pj : *it) {
    NW_ASSIGN_OR_RETURN(ProbeSummary p, ProbeFromJson(pj));
    r.probes.push_back(std::move(p));
  }
  if (auto s = j.find("stream"); s != j.end() && !s->is_null()) {
    NW_ASSIGN_OR_RETURN(r.stream, StreamTiming::FromJson(*s));
  }
  if (auto g = j.find("gpu_busy"); g != j.end() && !g->is_null()) {
    if (!g->is_number()) return Status::InvalidArgument("result.gpu_busy: must be a number");
    r.gpu_busy = g->get<double>();
  }
  return r;
}

}  // namespace nw
