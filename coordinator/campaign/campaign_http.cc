// The campaign parser's http backend block: backend: {http: {url: ..., model: ..., ...}} read
// into Campaign::http, and the checks that tie it to the rest of the campaign.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>
#include <vector>

#include "coordinator/campaign/campaign.h"
#include "coordinator/campaign/campaign_parser.h"
#include "coordinator/campaign/job_check.h"

namespace nw::campaign_internal {

// "http(s)://host[:port][/v1]": the only URLs the http backend takes (http/client.h HttpUrl
// parses them on the worker). "" when fine, else why not.
std::string HttpUrlProblem(std::string_view url) {
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    rest = url.substr(8);
  } else {
    return "must start with http:// or https://";
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (path != "" && path != "/" && path != "/v1" && path != "/v1/") {
    return "the path must be empty or /v1 (requests go to /v1/completions, /v1/chat/completions)";
  }
  if (authority.find('@') != std::string_view::npos) {
    return "credentials do not belong in the URL; use api_key_env or api_key_file";
  }
  std::string_view host = authority;
  if (!host.empty() && host.front() == '[') {  // [::1]:8000
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return "unterminated [ in the host";
    const std::string_view after = host.substr(close + 1);
    if (!after.empty() && after.front() != ':') return "expected :port after ]";
    host = after;  // only the port part is checked below
    if (host.empty()) return "";
  }
  const size_t colon = host.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = host.substr(colon + 1);
    int v = 0;
    auto r = std::from_chars(port.data(), port.data() + port.size(), v);
    if (port.empty() || r.ec != std::errc() || r.ptr != port.data() + port.size() || v < 1 ||
        v > 65535) {
      return "bad port '" + std::string(port) + "'";
    }
    host = host.substr(0, colon);
    if (host.empty() && authority.front() != '[') return "missing host";
  } else if (host.empty()) {
    return "missing host";
  }
  return "";
}

bool IsHttpMap(const YAML::Node& n) {
  if (!n.IsMap()) return false;
  for (const auto& kv : n) {
    const YAML::Node k = kv.first;
    if (k.IsScalar() && k.Scalar() == "http") return true;
  }
  return false;
}

bool IsHeaderName(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || (s.front() >= '0' && s.front() <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// http.sampling: {temperature, top_p, top_k, seed, min_tokens}, each checked where written.
Status Parser::ParseHttpSampling(const Entry& e, HttpSampling* out) {
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(e.value, e.path, kSamplingKeys));
  for (const Entry& f : fields) {
    const std::string& k = f.key;
    if (k == "temperature") {
      NW_ASSIGN_OR_RETURN(double t, ReadDouble(f.value, f.path));
      if (!(t >= 0 && t <= 2)) {
        return Error(f.value, f.path, "must be in 0..2 (0 is greedy), got " + f.value.Scalar());
      }
      out->temperature = t;
    } else if (k == "top_p") {
      NW_ASSIGN_OR_RETURN(double p, ReadDouble(f.value, f.path));
      if (!(p > 0 && p <= 1)) {
        return Error(f.value, f.path, "must be in (0, 1], got " + f.value.Scalar());
      }
      out->top_p = p;
    } else if (k == "top_k") {
      NW_ASSIGN_OR_RETURN(int64_t v, ReadInt(f.value, f.path, 1, kMaxSamplingTopK));
      out->top_k = static_cast<int>(v);
    } else if (k == "seed") {
      NW_ASSIGN_OR_RETURN(out->seed, ReadInt(f.value, f.path, 0, INT64_MAX));
    } else if (k == "min_tokens") {
      NW_ASSIGN_OR_RETURN(int64_t v, ReadInt(f.value, f.path, 0, kMaxNewTokens));
      out->min_tokens = static_cast<int>(v);
    } else if (k == "max_tokens") {
      return Error(f.key_node, f.path,
                   "the number of tokens to generate is generation.max_new_tokens (or "
                   "max_new_tokens in an include entry), sent as max_tokens");
    }
  }
  // Requests are greedy (temperature 0) unless the campaign says otherwise, and at temperature 0
  // these change nothing: asking for them there is a mistake.
  if (!out->temperature || *out->temperature == 0) {
    for (const Entry& f : fields) {
      if (f.key == "top_p" || f.key == "top_k" || f.key == "seed") {
        return Error(f.key_node, f.path,
                     "has no effect at temperature 0 (greedy, the default); set "
                     "sampling.temperature above 0 to sample");
      }
    }
  }
  return Status::Ok();
}

// backend: {http: {url: ..., model: ..., ...}} -> the backend value "http" plus c_.http.
Status Parser::ParseHttpBackend(const YAML::Node& n, const std::string& path, AxisValues* out) {
  NW_ASSIGN_OR_RETURN(std::vector<Entry> top, MapEntries(n, path, kHttpTopKeys));
  const Entry& e = top.front();  // IsHttpMap found the key, MapEntries allowed only it
  NW_ASSIGN_OR_RETURN(std::vector<Entry> fields, MapEntries(e.value, e.path, kHttpKeys));
  HttpBackendSettings hs;
  hs.where = Loc(e.key_node, e.path);
  hs.tokenizer_where = hs.where;
  HttpBackendSpec& h = hs.spec;
  bool has_url = false, has_model = false;
  SourceLocation ca_where;
  for (const Entry& f : fields) {
    const std::string& k = f.key;
    if (k == "url") {
      NW_ASSIGN_OR_RETURN(h.url, ReadString(f.value, f.path));
      const std::string problem = HttpUrlProblem(h.url);
      if (!problem.empty()) return Error(f.value, f.path, problem + ", got '" + h.url + "'");
      has_url = true;
    } else if (k == "model") {
      NW_ASSIGN_OR_RETURN(h.model, ReadString(f.value, f.path));
      if (h.model.empty()) return Error(f.value, f.path, "must not be empty");
      has_model = true;
    } else if (k == "api") {
      NW_ASSIGN_OR_RETURN(h.api, ReadString(f.value, f.path));
      if (h.api != "completions" && h.api != "chat") {
        return Error(f.value, f.path, "must be completions or chat, got '" + h.api + "'");
      }
    } else if (k == "tokenizer") {
      NW_ASSIGN_OR_RETURN(std::string t, ReadString(f.value, f.path));
      if (t.empty()) return Error(f.value, f.path, "must not be empty");
      NW_ASSIGN_OR_RETURN(std::filesystem::path abs, ResolvePath(t));
      h.tokenizer = abs.string();
      hs.tokenizer_where = Loc(f.value, f.path);
    } else if (k == "headers") {
      NW_ASSIGN_OR_RETURN(std::vector<Entry> headers, MapEntries(f.value, f.path, Names()));
      for (const Entry& he : headers) {
        if (!IsHeaderName(he.key)) {
          return Error(he.key_node, he.path, "not a valid HTTP header name");
        }
        const std::string lower = Lower(he.key);
        if (std::find(std::begin(kSecretHeaders), std::end(kSecretHeaders), lower) !=
            std::end(kSecretHeaders)) {
          return Error(he.key_node, he.path,
                       "credentials never go in the campaign file; name an environment "
                       "variable with api_key_env or a file with api_key_file");
        }
        if (lower == "host" || lower == "content-length" || lower == "content-type" ||
            lower == "connection" || lower == "transfer-encoding") {
          return Error(he.key_node, he.path, "is set by the client; remove it");
        }
        NW_ASSIGN_OR_RETURN(std::string value, ReadString(he.value, he.path));
        if (value.find_first_of("\r\n") != std::string::npos) {
          return Error(he.value, he.path, "must not contain line breaks");
        }
        h.headers[he.key] = value;
      }
    } else if (k == "api_key_env") {
      NW_ASSIGN_OR_RETURN(h.api_key_env, ReadString(f.value, f.path));
      if (!IsEnvName(h.api_key_env)) {
        return Error(f.value, f.path,
                     "must be the name of an environment variable (letters, digits and _), not "
                     "the key itself");
      }
    } else if (k == "api_key_file") {
      NW_ASSIGN_OR_RETURN(std::string file, ReadString(f.value, f.path));
      if (file.empty()) return Error(f.value, f.path, "must not be empty");
      NW_ASSIGN_OR_RETURN(std::filesystem::path abs, ResolvePath(file));
      h.api_key_file = abs.string();
    } else if (k == "engine_params") {
      NW_ASSIGN_OR_RETURN(h.engine_params, ReadBool(f.value, f.path));
    } else if (k == "concurrency") {
      NW_ASSIGN_OR_RETURN(int64_t c, ReadInt(f.value, f.path, 1, kMaxHttpConcurrency));
      h.concurrency = static_cast<int>(c);
    } else if (k == "timeout_ms") {
      NW_ASSIGN_OR_RETURN(h.timeout_ms, ReadInt(f.value, f.path, 1, kMaxHttpMs));
    } else if (k == "retries") {
      NW_ASSIGN_OR_RETURN(int64_t r, ReadInt(f.value, f.path, 0, kMaxHttpRetries));
      h.retries = static_cast<int>(r);
    } else if (k == "ready_timeout_ms") {
      NW_ASSIGN_OR_RETURN(h.ready_timeout_ms, ReadInt(f.value, f.path, 0, kMaxHttpMs));
    } else if (k == "health_path") {
      NW_ASSIGN_OR_RETURN(h.health_path, ReadString(f.value, f.path));
      if (!h.health_path.empty() && (h.health_path.front() != '/' ||
                                     h.health_path.find_first_of(" \r\n") != std::string::npos)) {
        return Error(f.value, f.path, "must be empty or a path starting with /");
      }
    } else if (k == "server_index_topk") {
      NW_ASSIGN_OR_RETURN(int64_t t, ReadInt(f.value, f.path, 0, kMaxTopk));
      h.server_index_topk = static_cast<int>(t);
    } else if (k == "stream") {
      NW_ASSIGN_OR_RETURN(h.stream, ReadBool(f.value, f.path));
      if (h.stream) hs.stream_where = Loc(f.value, f.path);
    } else if (k == "ca_file") {
      NW_ASSIGN_OR_RETURN(std::string file, ReadString(f.value, f.path));
      if (file.empty()) return Error(f.value, f.path, "must not be empty");
      NW_ASSIGN_OR_RETURN(std::filesystem::path abs, ResolvePath(file));
      h.ca_file = abs.string();
      ca_where = Loc(f.value, f.path);
    } else if (k == "sampling") {
      NW_RETURN_IF_ERROR(ParseHttpSampling(f, &h.sampling));
    }
  }
  if (!h.ca_file.empty() && h.url.rfind("https://", 0) != 0) {
    return Error(ca_where, "ca_file is for https:// URLs; this url is " + h.url);
  }
  if (!has_url || !has_model) {
    return Error(e.value, e.path,
                 std::string("missing ") + (!has_url ? "url" : "model") +
                     ": an http backend needs at least url and model");
  }
  if (!h.api_key_env.empty() && !h.api_key_file.empty()) {
    return Error(e.value, e.path, "give api_key_env or api_key_file, not both");
  }
  if (c_.http) {
    if (!(c_.http->spec == h)) {
      return Error(hs.where, "a campaign evaluates one http backend; this one differs from " +
                                 At(c_.http->where) +
                                 " (name it `http` to refer to that one, or write one campaign "
                                 "per server)");
    }
  } else {
    c_.http = hs;
  }
  AxisValue v;
  v.value = std::string("http");
  v.where = Loc(n, path);
  out->push_back(std::move(v));
  return Status::Ok();
}

// Every "http" backend value needs the settings of a {http: {...}} somewhere in the file.
Status Parser::CheckHttpReferences() const {
  if (c_.http) return Status::Ok();
  auto check = [&](const AxisValues& values) -> Status {
    for (const AxisValue& v : values) {
      if (v.name() == "http") {
        return Error(v.where,
                     "backend 'http' needs its settings: write {http: {url: ..., model: ...}} "
                     "under matrix.backend or in an include entry");
      }
    }
    return Status::Ok();
  };
  NW_RETURN_IF_ERROR(check(c_.matrix[Ix(Axis::kBackend)]));
  for (const MatrixEntry& m : c_.include) NW_RETURN_IF_ERROR(check(m.axes[Ix(Axis::kBackend)]));
  for (const MatrixEntry& m : c_.exclude) NW_RETURN_IF_ERROR(check(m.axes[Ix(Axis::kBackend)]));
  return Status::Ok();
}

// Without engine_params the http backend sends neither topk nor precision to the server: http
// cells that differ only in them would send identical requests and be reported as different
// configurations.
Status Parser::CheckHttpCells() const {
  // Probes come from the indexer top-k in a whole (non-streamed) answer; a streamed one has none.
  if (c_.http && c_.http->spec.stream && c_.http->spec.api == "completions") {
    for (const Cell& cell : c_.cells) {
      if (c_.value(cell, Axis::kBackend).name() == "http" && cell.probe) {
        return Error(c_.http->stream_where,
                     "a streamed answer carries no indexer top-k, so the http cells cannot probe; "
                     "set probe: false (or stream: false: probes and latency figures need separate "
                     "campaigns)");
      }
    }
  }
  if (c_.http && !c_.http->spec.engine_params) {
    for (Axis a : {Axis::kTopk, Axis::kPrecision}) {
      const AxisValue* first = nullptr;
      for (const Cell& cell : c_.cells) {
        if (c_.value(cell, Axis::kBackend).name() != "http") continue;
        const AxisValue& v = c_.value(cell, a);
        if (first == nullptr) {
          first = &v;
        } else if (v.ToString() != first->ToString()) {
          const std::string axis(AxisName(a));
          return Error(v.where, "the http backend (" + At(c_.http->where) + ") does not send " +
                                    axis +
                                    " to the server (engine_params is false), so its cells "
                                    "with " +
                                    axis + " " + first->ToString() + " and " + v.ToString() +
                                    " would be identical requests reported as different "
                                    "configurations; keep one " +
                                    axis + " for http (exclude {backend: http, " + axis + ": " +
                                    v.ToString() +
                                    "}), or set engine_params: true if the server is `nw serve`");
        }
      }
    }
  }
  return Status::Ok();
}

// Prompt lengths are counted with a tokenizer: the server's when the campaign has no model.
Status Parser::CheckHttpTokenizer(bool has_model) const {
  if (c_.http && c_.http->spec.tokenizer.empty() && !has_model) {
    return Error(c_.http->where,
                 "tokenizer: required when the campaign has no model (the tokenizer.json of the "
                 "server's model, so prompt lengths are exact)");
  }
  return Status::Ok();
}

}  // namespace nw::campaign_internal
