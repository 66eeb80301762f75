#include "coordinator/campaign/job_check.h"

#include <algorithm>
#include <cmath>

#include "coordinator/campaign/campaign.h"
#include "task/niah.h"

namespace nw {
namespace {

Status Bad(const std::string& field, const std::string& why) {
  return Status::InvalidArgument("job." + field + ": " + why);
}

Status InRange(const std::string& field, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return Bad(field,
             std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
}

bool IsLowerHex(const std::string& s, size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool Printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u != 0x7f;
  });
}

// An absolute, lexically normal path without `..`, inside one of the roots when there are any.
Status CheckPath(const std::string& field, const std::string& path,
                 const std::vector<std::filesystem::path>& roots) {
  if (path.empty() || path.size() > kMaxJobPathBytes || !Printable(path)) {
    return Bad(field,
               "must be a printable path of 1.." + std::to_string(kMaxJobPathBytes) + " bytes");
  }
  const std::filesystem::path p(path);
  if (!p.is_absolute()) return Bad(field, "'" + path + "' is not an absolute path");
  for (const auto& part : p) {
    if (part == "..") return Bad(field, "'" + path + "' contains '..'");
  }
  if (roots.empty()) return Status::Ok();
  const std::filesystem::path norm = p.lexically_normal();
  for (const auto& root : roots) {
    const std::filesystem::path r = root.lexically_normal();
    auto rel = norm.lexically_relative(r);
    if (!rel.empty() && *rel.begin() != "..") return Status::Ok();
  }
  std::string list;
  for (const auto& root : roots) list += (list.empty() ? "" : ", ") + root.string();
  return Bad(field, "'" + path + "' is outside the allowed model roots (" + list + ")");
}

Status CheckHttp(const HttpBackendSpec& h, const JobCheckOptions& options) {
  if (h.url.empty() || h.url.size() > kMaxJobPathBytes || !Printable(h.url) ||
      (h.url.rfind("http://", 0) != 0 && h.url.rfind("https://", 0) != 0)) {
    return Bad("http.url", "must be an http:// or https:// URL");
  }
  if (h.model.size() > kMaxJobPathBytes || !Printable(h.model)) {
    return Bad("http.model",
               "must be printable, at most " + std::to_string(kMaxJobPathBytes) + " bytes");
  }
  if (h.api != "completions" && h.api != "chat") {
    return Bad("http.api", "must be completions or chat, got '" + h.api + "'");
  }
  NW_RETURN_IF_ERROR(CheckPath("http.tokenizer", h.tokenizer, options.model_roots));
  if (!IsLowerHex(h.tokenizer_digest, 64)) {
    return Bad("http.tokenizer_digest", "must be 64 lowercase hex digits (sha256)");
  }
  if (h.headers.size() > kMaxHttpHeaders) {
    return Bad("http.headers", "more than " + std::to_string(kMaxHttpHeaders) + " headers");
  }
  for (const auto& [k, v] : h.headers) {
    if (k.empty() || k.size() > 256 || v.size() > kMaxJobPathBytes || !Printable(k) ||
        !Printable(v)) {
      return Bad("http.headers", "header '" + k + "' is empty, too long or not printable");
    }
  }
  if (!h.api_key_file.empty()) {
    NW_RETURN_IF_ERROR(CheckPath("http.api_key_file", h.api_key_file, {}));
  }
  NW_RETURN_IF_ERROR(InRange("http.concurrency", h.concurrency, 1, kMaxHttpConcurrency));
  NW_RETURN_IF_ERROR(InRange("http.timeout_ms", h.timeout_ms, 1, kMaxHttpMs));
  NW_RETURN_IF_ERROR(InRange("http.retries", h.retries, 0, kMaxHttpRetries));
  NW_RETURN_IF_ERROR(InRange("http.ready_timeout_ms", h.ready_timeout_ms, 0, kMaxHttpMs));
  if (!h.health_path.empty() && h.health_path[0] != '/') {
    return Bad("http.health_path", "must be empty or a path starting with /");
  }
  if (!h.ca_file.empty()) {
    NW_RETURN_IF_ERROR(CheckPath("http.ca_file", h.ca_file, {}));
    if (h.url.rfind("https://", 0) != 0) return Bad("http.ca_file", "is for https:// URLs only");
  }
  // The sampling values were range-checked when the spec was read (HttpSampling::FromJson);
  // min_tokens is also bounded by what a job may generate.
  if (h.sampling.min_tokens) {
    NW_RETURN_IF_ERROR(
        InRange("http.sampling.min_tokens", *h.sampling.min_tokens, 0, kMaxNewTokens));
  }
  return InRange("http.server_index_topk", h.server_index_topk, 0, kMaxTopk);
}

}  // namespace

JobCheckOptions DefaultJobCheckOptions() {
  JobCheckOptions o;
  o.backends = KnownBackends();
  return o;
}

Status CheckJobSpec(const JobSpec& s, const JobCheckOptions& options) {
  if (!ParseNiahTask(s.task).ok()) return Bad("task", "unknown task '" + s.task + "'");
  if (!ParseNiahHaystack(s.haystack).ok()) {
    return Bad("haystack", "unknown haystack '" + s.haystack + "'");
  }
  const bool http = s.backend == "http";
  if (http) {
    if (!options.allow_http) return Bad("backend", "the http backend is not allowed here");
    if (!s.http) return Bad("http", "missing (backend http needs its settings)");
    NW_RETURN_IF_ERROR(CheckHttp(*s.http, options));
  } else {
    if (std::find(options.backends.begin(), options.backends.end(), s.backend) ==
        options.backends.end()) {
      return Bad("backend", "unknown backend '" + s.backend + "'");
    }
    if (s.http) return Bad("http", "only a job on the http backend has http settings");
  }
  NW_RETURN_IF_ERROR(InRange("topk", s.topk, 1, kMaxTopk));
  NW_RETURN_IF_ERROR(InRange("context_length", s.context_length, 1, kMaxContextLength));
  const double pos = s.needle_position;
  if (!std::isfinite(pos) || pos > 1 || (pos < 0 && pos != std::floor(pos)) ||
      pos < -static_cast<double>(kMaxContextLength)) {
    return Bad("needle_position",
               "must be a fraction in [0, 1] or a whole negative token offset, got " +
                   std::to_string(pos));
  }
  NW_RETURN_IF_ERROR(InRange("max_new_tokens", s.max_new_tokens, 1, kMaxNewTokens));
  NW_RETURN_IF_ERROR(InRange("trial", s.trial, 0, kMaxTrials - 1));
  // Jobs of a campaign without a model (every cell on http) have neither path nor digest.
  if (!(http && s.model_dir.empty() && s.model_digest.empty())) {
    NW_RETURN_IF_ERROR(CheckPath("model_dir", s.model_dir, options.model_roots));
    if (!IsLowerHex(s.model_digest, 64)) {
      return Bad("model_digest", "must be 64 lowercase hex digits (sha256)");
    }
  }
  if (s.engine_version.empty() || s.engine_version.size() > 256 || !Printable(s.engine_version)) {
    return Bad("engine_version", "must be printable, 1..256 bytes");
  }
  if (Status p = s.precision.Validate(); !p.ok()) return p.WithContext("job.precision");
  return Status::Ok();
}

}  // namespace nw
