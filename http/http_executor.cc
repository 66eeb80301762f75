#include "http/http_executor.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/sha256.h"
#include "engine/text/tokenizer.h"
#include "http/client.h"
#include "http/openai.h"
#include "http/stream_reader.h"
#include "task/job_prompt.h"
#include "task/scoring.h"

namespace nw {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The API key, as an Authorization header, from the environment or a file; never logged.
Result<HttpHeaders> AuthHeaders(const HttpBackendSpec& h) {
  std::string key;
  if (!h.api_key_env.empty()) {
    const char* v = std::getenv(h.api_key_env.c_str());
    if (v == nullptr || *v == '\0') {
      return Status::FailedPrecondition("api_key_env: the environment variable " + h.api_key_env +
                                        " is not set on this worker");
    }
    key = v;
  } else if (!h.api_key_file.empty()) {
    std::ifstream in(h.api_key_file, std::ios::binary);
    if (!in) {
      return Status::FailedPrecondition("api_key_file: cannot read " + h.api_key_file);
    }
    std::ostringstream buf;
    buf << in.rdbuf();
    key = buf.str();
    while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
    size_t start = 0;
    while (start < key.size() && std::isspace(static_cast<unsigned char>(key[start]))) ++start;
    key.erase(0, start);
    if (key.empty())
      return Status::FailedPrecondition("api_key_file: " + h.api_key_file + " is empty");
  } else {
    return HttpHeaders{};
  }
  if (key.find_first_of("\r\n") != std::string::npos) {
    return Status::FailedPrecondition("the API key contains a line break");
  }
  return HttpHeaders{{"Authorization", "Bearer " + key}};
}

// The message of an error body (OpenAI's {"error":{"message":...}}, vLLM's {"message":...}), or
// the start of the body.
std::string ErrorText(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_object()) {
        if (auto m = e->find("message"); m != e->end() && m->is_string())
          return m->get<std::string>();
      } else if (e->is_string()) {
        return e->get<std::string>();
      }
    }
    if (auto m = j.find("message"); m != j.end() && m->is_string()) return m->get<std::string>();
    if (auto d = j.find("detail"); d != j.end() && d->is_string()) return d->get<std::string>();
  }
  std::string head = body.substr(0, 200);
  for (char& c : head) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return head.empty() ? "(empty body)" : head;
}

std::optional<double> HeaderMs(const HttpResponse& r, const std::string& name) {
  auto it = r.headers.find(name);
  if (it == r.headers.end()) return std::nullopt;
  double v = 0;
  const std::string& s = it->second;
  auto res = std::from_chars(s.data(), s.data() + s.size(), v);
  if (res.ec != std::errc() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

struct HttpBackendPool::Impl {
  struct Server {
    std::shared_ptr<HttpClient> client;
    std::mutex ready_mu;  // one readiness wait at a time per server
    bool ready = false;   // guarded by ready_mu
  };

  std::mutex mu;
  std::map<std::string, std::shared_ptr<Server>> servers;  // by origin
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const Tokenizer>> tokenizers;

  std::shared_ptr<Server> ServerFor(const HttpUrl& url, const HttpBackendSpec& h) {
    std::lock_guard<std::mutex> lock(mu);
    std::shared_ptr<Server>& s = servers[url.Origin()];
    if (!s) {
      s = std::make_shared<Server>();
      HttpClientOptions o;
      o.max_in_flight = std::max(1, h.concurrency);
      for (const auto& [name, value] : h.headers) o.headers.emplace_back(name, value);
      o.user_agent = std::string("needlework/") + kEngineVersion;
      o.ca_file = h.ca_file;
      s->client = std::make_shared<HttpClient>(url, std::move(o));
    }
    return s;
  }

  // Loads the tokenizer once per (path, digest); the file must still have the campaign's digest.
  Result<std::shared_ptr<const Tokenizer>> TokenizerFor(const std::string& path,
                                                        const std::string& digest) {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_pair(path, digest);
    if (auto it = tokenizers.find(key); it != tokenizers.end()) return it->second;
    NW_ASSIGN_OR_RETURN(std::string actual, Sha256File(path));
    if (actual != digest) {
      return Status::FailedPrecondition(path + " changed since the campaign was expanded (sha256 " +
                                        actual.substr(0, 12) + ", the job expects " +
                                        digest.substr(0, 12) + "); run the campaign again");
    }
    auto tok = Tokenizer::Load(path);
    if (!tok.ok()) return tok.status().WithContext(path);
    auto shared = std::make_shared<const Tokenizer>(*std::move(tok));
    tokenizers.emplace(key, shared);
    return shared;
  }
};

HttpBackendPool::HttpBackendPool() : impl_(std::make_unique<Impl>()) {}
HttpBackendPool::~HttpBackendPool() = default;

std::vector<IndexerProbe> ProbesFromIndexerTopk(std::span<const int32_t> topk, int64_t rows,
                                                int width, std::span<const int> layer_ids,
                                                int64_t needle_begin, int64_t needle_end,
                                                int64_t query_begin) {
  std::vector<IndexerProbe> out;
  const size_t L = layer_ids.size();
  const size_t K = static_cast<size_t>(std::max(width, 0));
  if (rows <= 0 || K == 0 || topk.size() != static_cast<size_t>(rows) * L * K) return out;
  constexpr int64_t r = 4;  // indexer layers are the ratio-4 layers
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t l = 0; l < L; ++l) {
    IndexerProbe p;
    p.layer = layer_ids[l];
    p.topk = width;
    for (int64_t t = std::max<int64_t>(0, query_begin); t < rows; ++t) {
      const int32_t* set = topk.data() + (static_cast<size_t>(t) * L + l) * K;
      const int64_t visible = (t + 1) / r;
      // Entry i pools tokens [r(i-1), r(i+1)); it covers the needle when that overlaps it.
      auto covers = [&](int64_t i) {
        const int64_t first = r * (i - 1), last = r * (i + 1) - 1;
        return !(last < needle_begin || first >= needle_end);
      };
      bool any_visible = false;
      if (needle_end > needle_begin) {
        const int64_t lo = std::max<int64_t>(0, needle_begin / r - 1);
        const int64_t hi = std::min<int64_t>(visible - 1, (needle_end - 1) / r + 1);
        for (int64_t i = lo; i <= hi && !any_visible; ++i) any_visible = covers(i);
      }
      int32_t rank = -1;
      bool hit = false;
      if (any_visible) {
        for (size_t j = 0; j < K; ++j) {
          if (set[j] >= 0 && set[j] < visible && covers(set[j])) {
            rank = static_cast<int32_t>(j);
            hit = true;
            break;
          }
        }
        if (!hit) rank = width;
      }
      p.positions.push_back(t);
      p.needle_rank.push_back(rank);
      p.in_topk.push_back(hit ? 1 : 0);
      p.num_visible.push_back(static_cast<int32_t>(visible));
      p.needle_score.push_back(nan);
      p.kth_score.push_back(nan);
      p.next_score.push_back(nan);
      p.topk_sets.insert(p.topk_sets.end(), set, set + K);
    }
    out.push_back(std::move(p));
  }
  return out;
}

HttpExecutor::HttpExecutor(HttpExecutorOptions options) : options_(std::move(options)) {
  if (!options_.pool) options_.pool = std::make_shared<HttpBackendPool>();
  if (options_.backoff_initial_ms < 1) options_.backoff_initial_ms = 1;
  options_.backoff_max_ms = std::max(options_.backoff_max_ms, options_.backoff_initial_ms);
  if (options_.ready_poll_ms < 1) options_.ready_poll_ms = 1;
}

HttpExecutor::~HttpExecutor() = default;

nlohmann::json HttpExecutor::Capabilities() const {
  return json{
      {"backends", json::array({"http"})}, {"device", "http"}, {"engine_version", kEngineVersion}};
}

HttpExecutor::Stats HttpExecutor::stats() const {
  return Stats{requests_.load(),  retries_.load(),  transport_errors_.load(), server_errors_.load(),
               malformed_.load(), timeouts_.load(), health_checks_.load()};
}

void HttpExecutor::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Result<JobResult> HttpExecutor::Run(const JobSpec& spec, const std::string& key, int attempt) {
  const auto t0 = Clock::now();
  if (!spec.http) return Status::InvalidArgument("job has backend http but no http settings");
  const HttpBackendSpec& h = *spec.http;
  NW_ASSIGN_OR_RETURN(HttpUrl url, HttpUrl::Parse(h.url));
  if (h.api != "completions" && h.api != "chat") {
    return Status::InvalidArgument("http.api must be completions or chat, got '" + h.api + "'");
  }
  const ApiKind kind = h.api == "chat" ? ApiKind::kChat : ApiKind::kCompletions;
  HttpBackendPool::Impl& pool = options_.pool->impl();
  NW_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer,
                      pool.TokenizerFor(h.tokenizer, h.tokenizer_digest));

  NW_ASSIGN_OR_RETURN(NiahPrompt prompt, BuildJobPrompt(*tokenizer, spec));
  NW_ASSIGN_OR_RETURN(HttpHeaders auth, AuthHeaders(h));

  json body{{"model", h.model},
            {"max_tokens", spec.max_new_tokens},
            {"temperature", 0},
            {"stream", h.stream}};
  // The campaign's sampling parameters, as given (temperature stays 0 unless it says otherwise).
  body.update(h.sampling.ToJson());
  if (h.stream) body["stream_options"] = json{{"include_usage", true}};
  if (kind == ApiKind::kCompletions) {
    body["prompt"] = prompt.tokens;
    if (spec.probe) {
      body["return_indexer_topk"] = true;
      body["return_meta_info"] = true;
    }
  } else {
    body["messages"] = json::array({json{{"role", "user"}, {"content", prompt.text}}});
  }
  if (h.engine_params) {
    body["index_topk"] = spec.topk;
    body["precision"] = spec.precision.ToJson();
  }
  const std::string payload = body.dump(-1, ' ', false, json::error_handler_t::replace);
  const std::string path = kind == ApiKind::kChat ? "/v1/chat/completions" : "/v1/completions";
  const std::string where = url.Origin();
  const std::chrono::milliseconds timeout(h.timeout_ms);

  std::shared_ptr<HttpBackendPool::Impl::Server> server = pool.ServerFor(url, h);
  if (!h.health_path.empty()) {
    std::lock_guard<std::mutex> lock(server->ready_mu);
    const auto deadline = Clock::now() + std::chrono::milliseconds(h.ready_timeout_ms);
    while (!server->ready) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      ++health_checks_;
      auto r = server->client->Send(
          "GET", h.health_path, "",
          std::clamp(left, std::chrono::milliseconds(100), std::chrono::milliseconds(5000)), auth);
      if (r.ok() && r->status < 500) {
        server->ready = true;
        break;
      }
      // A refused certificate (or ca_file) does not get better by waiting.
      if (!r.ok() && r.status().code() == StatusCode::kFailedPrecondition) return r.status();
      const std::string last =
          r.ok() ? "answered " + std::to_string(r->status) : r.status().message();
      if (Clock::now() >= deadline) {
        return Status::Unavailable("the server at " + where + " did not become ready within " +
                                   std::to_string(h.ready_timeout_ms) + " ms (GET " +
                                   h.health_path + ": " + last + ")");
      }
      std::this_thread::sleep_for(
          std::min(std::chrono::milliseconds(options_.ready_poll_ms),
                   std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()) +
                       std::chrono::milliseconds(1)));
    }
  }

  HttpResponse response;
  ParsedCompletion parsed;
  std::optional<StreamReader> streamed;  // the last try's stream, with h.stream
  for (int i = 0;; ++i) {
    if (i > 0) {
      ++retries_;
      const int shift = std::min(i - 1, 20);
      const int64_t delay = std::min(options_.backoff_max_ms, options_.backoff_initial_ms << shift);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    }
    ++requests_;
    HttpBodySink sink;
    if (h.stream) {
      streamed.emplace(kind, Clock::now());
      sink = [&streamed](std::string_view bytes) {
        return streamed->Feed(bytes, StreamReader::Clock::now());
      };
    }
    Result<HttpResponse> r = server->client->Send("POST", path, payload, timeout, auth, sink);
    Status failure;
    if (!r.ok()) {
      const StatusCode code = r.status().code();
      if (code == StatusCode::kDeadlineExceeded) {
        ++timeouts_;
        return r.status();
      }
      if (code == StatusCode::kResourceExhausted || code == StatusCode::kFailedPrecondition) {
        return r.status();
      }
      if (code == StatusCode::kCorruption) {  // a malformed stream
        ++malformed_;
        failure = Status::Unavailable(where + ": " + r.status().message());
      } else {
        ++transport_errors_;
        failure = r.status();
      }
    } else if (r->status == 200) {
      Result<ParsedCompletion> p = Status::Corruption("");
      if (h.stream) {
        p = streamed->Finish();
        const auto type = r->headers.find("content-type");
        if (!p.ok() && type != r->headers.end() &&
            type->second.find("event-stream") == std::string::npos) {
          p = Status::Corruption(p.status().message() + " (the answer is " + type->second +
                                 ", not an event stream)");
        }
      } else {
        const json j = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
        p = j.is_discarded() ? Result<ParsedCompletion>(Status::Corruption(
                                   "malformed completion response: the body is not JSON"))
                             : ParseCompletionResponse(j, kind);
      }
      if (p.ok()) {
        parsed = *std::move(p);
        response = *std::move(r);
        break;
      }
      ++malformed_;
      failure = Status::Unavailable(where + ": " + p.status().message());
    } else if (r->status >= 500 || r->status == 408 || r->status == 429) {
      ++server_errors_;
      failure = Status::Unavailable(where + " answered " + std::to_string(r->status) + ": " +
                                    ErrorText(r->body));
    } else {
      // Any other answer means the request is wrong for this server: retrying cannot help.
      const StatusCode code = r->status == 401 || r->status == 403 ? StatusCode::kFailedPrecondition
                              : r->status == 404                   ? StatusCode::kNotFound
                                                                   : StatusCode::kInvalidArgument;
      std::string hint;
      if (r->status == 401 || r->status == 403) hint = " (check api_key_env / api_key_file)";
      return Status(code, where + path + " answered " + std::to_string(r->status) + ": " +
                              ErrorText(r->body) + hint);
    }
    if (i >= h.retries) {
      if (!r.ok()) {  // the server may be gone: wait for it again before the next job
        std::lock_guard<std::mutex> lock(server->ready_mu);
        server->ready = false;
      }
      return Status::Unavailable(failure.message() + " (" + std::to_string(i + 1) + " tries)");
    }
    Log("http " + where + ": " + failure.message() + "; retrying (" + std::to_string(i + 1) +
        " of " + std::to_string(h.retries) + ")");
  }

  JobResult res;
  res.job_key = key;
  res.attempt = attempt;
  const std::string& finish = parsed.finish_reason;
  if (finish != "stop" && finish != "length" && !finish.empty()) {
    return Status::Unavailable(where + " ended the generation with finish_reason '" + finish + "'");
  }
  const bool stopped = finish == "stop";
  res.generated_text = parsed.text;
  res.expected = prompt.expected;
  res.outcome = ScoreAnswer({res.generated_text, res.expected, stopped});
  res.needle_token_offset = prompt.needle_begin;
  res.prompt_hash = prompt.prompt_hash;
  const int64_t ours = static_cast<int64_t>(prompt.tokens.size());
  if (kind == ApiKind::kCompletions && parsed.prompt_tokens && *parsed.prompt_tokens != ours) {
    return Status::FailedPrecondition(
        where + " counted " + std::to_string(*parsed.prompt_tokens) + " prompt tokens for the " +
        std::to_string(ours) +
        " token ids sent: it does not take the ids as they are (a BOS token added?), so the "
        "context length would not be exact");
  }
  res.prompt_tokens = parsed.prompt_tokens.value_or(ours);
  res.generated_tokens = parsed.completion_tokens.value_or(
      static_cast<int64_t>(tokenizer->Encode(parsed.text).size()) + (stopped ? 1 : 0));
  if (streamed) res.stream = streamed->Timing(res.generated_tokens);
  res.prefill_ms = HeaderMs(response, "nw-prefill-ms").value_or(0);
  res.decode_ms = HeaderMs(response, "nw-decode-ms").value_or(0);
  res.device = where;
  auto server_name = response.headers.find("server");
  res.engine_version =
      "http " + (server_name != response.headers.end() ? server_name->second : "unknown");

  if (spec.probe && kind == ApiKind::kCompletions && parsed.meta_info.is_object()) {
    const json& meta = parsed.meta_info;
    auto data = meta.find("indexer_topk");
    if (data != meta.end() && data->is_string()) {
      NW_ASSIGN_OR_RETURN(std::vector<int32_t> values,
                          DecodeInt32Base64(data->get_ref<const std::string&>()));
      int64_t rows = res.prompt_tokens + res.generated_tokens - 1;
      int64_t width = h.server_index_topk;
      int64_t layers = 0;
      auto shape = meta.find("indexer_topk_shape");
      if (shape != meta.end() && shape->is_array() && shape->size() == 3 &&
          std::all_of(shape->begin(), shape->end(), [](const json& v) {
            return v.is_number_integer() && v.get<int64_t>() >= 0;
          })) {
        rows = (*shape)[0].get<int64_t>();
        layers = (*shape)[1].get<int64_t>();
        width = (*shape)[2].get<int64_t>();
      } else if (width > 0 && rows > 0 && values.size() % static_cast<size_t>(rows * width) == 0) {
        layers = static_cast<int64_t>(values.size()) / (rows * width);
      }
      if (rows <= 0 || width <= 0 || layers <= 0 ||
          values.size() != static_cast<size_t>(rows * layers * width)) {
        return Status::Corruption(
            where + ": meta_info.indexer_topk holds " + std::to_string(values.size()) +
            " ids, which is not (rows, layers, topk) = (" + std::to_string(rows) + ", " +
            std::to_string(layers) + ", " + std::to_string(width) +
            ") (set http.server_index_topk for servers that do not report the shape)");
      }
      std::vector<int> layer_ids;
      auto ids = meta.find("indexer_layers");
      if (ids != meta.end() && ids->is_array() && static_cast<int64_t>(ids->size()) == layers &&
          std::all_of(ids->begin(), ids->end(),
                      [](const json& v) { return v.is_number_integer(); })) {
        for (const json& v : *ids) layer_ids.push_back(v.get<int>());
      } else {
        for (int64_t l = 0; l < layers; ++l) layer_ids.push_back(static_cast<int>(l));
      }
      const std::vector<IndexerProbe> probes =
          ProbesFromIndexerTopk(values, rows, static_cast<int>(width), layer_ids,
                                prompt.needle_begin, prompt.needle_end, prompt.question_begin);
      for (const IndexerProbe& p : probes) res.probes.push_back(SummarizeProbe(p, ours - 1));
    }
  }
  res.total_ms = MsSince(t0);
  return res;
}

JobResult HttpExecutor::Execute(const JobSpec& spec, const std::string& key, int attempt) {
  const auto t0 = Clock::now();
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
  err.device = spec.http ? spec.http->url : "http";
  err.engine_version = "http";
  err.total_ms = MsSince(t0);
  Log("http job " + key.substr(0, 12) + ": " + std::string(OutcomeName(err.outcome)) + ": " +
      err.error_message);
  return err;
}

BackendRouter::BackendRouter(EngineExecutorOptions engine, HttpExecutorOptions http)
    : engine_(std::move(engine)), http_(std::move(http)) {}

JobResult BackendRouter::Execute(const JobSpec& spec, const std::string& key, int attempt) {
  if (spec.backend == "http") return http_.Execute(spec, key, attempt);
  return engine_.Execute(spec, key, attempt);
}

nlohmann::json BackendRouter::Capabilities() const {
  json caps = engine_.Capabilities();
  caps["backends"].push_back("http");
  return caps;
}

}  // namespace nw
