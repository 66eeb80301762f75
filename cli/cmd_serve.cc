// nw serve --model DIR: needlework's engine behind an OpenAI-compatible HTTP API (/v1/completions,
// /v1/chat/completions, /v1/models, /health), so the http campaign backend and any OpenAI client
// can talk to it. Runs until SIGINT or SIGTERM. docs/http.md describes the API.
// Exit codes: 0 stopped by a signal; 2 bad options, an unloadable model or an address in use.
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "common/signal_stopper.h"
#include "engine/backend_catalog.h"
#include "http/server.h"

namespace nw::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string backend = "cpu";
  std::string listen = "127.0.0.1:8000";
  std::string name;
  int max_batch = 16;
  int max_running = 8;
  int64_t max_batched_tokens = 256;
  size_t max_body_bytes = 16 << 20;
  int64_t timeout_ms = 600'000;
  int64_t read_timeout_ms = 30'000;
  int max_connections = 256;
  bool allow_faults = false;
  std::string api_key;
  std::string api_key_file;
  std::string access_log;
};

// The key of --api-key-file: the file's content without surrounding whitespace.
Result<std::string> ReadKeyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("--api-key-file " + path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  std::string key = text.str();
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!key.empty() && space(static_cast<unsigned char>(key.back()))) key.pop_back();
  size_t start = 0;
  while (start < key.size() && space(static_cast<unsigned char>(key[start]))) ++start;
  key.erase(0, start);
  if (key.empty()) return Status::InvalidArgument("--api-key-file " + path + ": the file is empty");
  return key;
}

int Serve(const ServeArgs& a, const Globals& g) {
  // Before any thread starts, so that every thread inherits the blocked signals and only the
  // stopper's thread takes them.
  SignalStopper stopper;

  std::string api_key = a.api_key;
  if (!a.api_key_file.empty()) {
    auto key = ReadKeyFile(a.api_key_file);
    if (!key.ok()) {
      std::cerr << "nw serve: " << key.status().ToString() << "\n";
      return 2;
    }
    api_key = *std::move(key);
  }
  // The access log: "-" is stderr; a file is appended to, one line per request, flushed.
  std::shared_ptr<std::ofstream> access_file;
  if (!a.access_log.empty() && a.access_log != "-") {
    access_file = std::make_shared<std::ofstream>(a.access_log, std::ios::app);
    if (!*access_file) {
      std::cerr << "nw serve: --access-log " << a.access_log << ": cannot be opened for writing\n";
      return 2;
    }
  }
  auto model = ServeModel::Load(a.model, a.backend);
  if (!model.ok()) {
    std::cerr << "nw serve: " << model.status().ToString() << "\n";
    return 2;
  }
  HttpServerOptions so;
  so.listen = a.listen;
  so.model_name = a.name;
  if (so.model_name.empty()) {
    const std::filesystem::path dir = std::filesystem::path(a.model).lexically_normal();
    so.model_name =
        dir.has_filename() ? dir.filename().string() : dir.parent_path().filename().string();
  }
  so.max_batch = a.max_batch;
  so.max_running = a.max_running;
  so.max_batched_tokens = a.max_batched_tokens;
  so.max_body_bytes = a.max_body_bytes;
  so.timeout_ms = a.timeout_ms;
  so.read_timeout_ms = a.read_timeout_ms;
  so.max_connections = a.max_connections;
  so.allow_faults = a.allow_faults;
  so.api_key = api_key;
  if (access_file) {
    so.access_log = [access_file](std::string_view line) {
      *access_file << line << '\n' << std::flush;  // the I/O thread only
    };
  } else if (a.access_log == "-") {
    so.access_log = [](std::string_view line) { std::cerr << line << '\n'; };
  }
  if (!g.quiet) so.log = [](std::string_view line) { std::cerr << line << "\n"; };
  auto server = HttpServer::Start(*std::move(model), std::move(so));
  if (!server.ok()) {
    std::cerr << "nw serve: " << server.status().ToString() << "\n";
    return 2;
  }
  stopper.Wait();
  (*server)->Stop();
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (see docs/http.md)");
  auto a = std::make_shared<ServeArgs>();
  cmd->add_option("--model", a->model, "Model folder (config.json, tokenizer.json, weights)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--backend", a->backend,
                  "Engine backend (cpu, cpu-paged, cpu-pd; cuda* with a CUDA build and a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember(BackendNames()));
  cmd->add_option("--listen", a->listen, "host:port to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--name", a->name, "Model id served (default: the model folder's name)");
  cmd->add_option("--max-batch", a->max_batch,
                  "Requests queued or running at once; more are answered 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-running-requests", a->max_running,
                  "Requests run together (continuous batching: their decode steps share one pass "
                  "over the weights); 1 runs one request at a time")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 12));
  cmd->add_option("--max-batched-tokens", a->max_batched_tokens,
                  "Tokens per scheduler step: one per decoding request, the rest for prompt "
                  "chunks (bounds how long a long prompt delays the others' next token); must "
                  "exceed --max-running-requests")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--max-body-bytes", a->max_body_bytes,
                  "Largest request body accepted; larger ones are answered 413")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 32));
  cmd->add_option("--timeout-ms", a->timeout_ms,
                  "Per-request limit from arrival to answer; later requests are answered 504")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{24} * 3600 * 1000));
  cmd->add_option("--read-timeout-ms", a->read_timeout_ms,
                  "Time a connection has to deliver each request (header and body), also the "
                  "keep-alive idle time; slower connections are closed")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{3600} * 1000));
  cmd->add_option("--max-connections", a->max_connections,
                  "Open connections at most; at the cap the one waiting longest for a request "
                  "is closed to make room")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  auto* key_opt = cmd->add_option("--api-key", a->api_key,
                                  "Require 'Authorization: Bearer KEY' on every route but /health "
                                  "(prefer --api-key-file: a command line is visible to others)");
  cmd->add_option("--api-key-file", a->api_key_file,
                  "Read the API key from this file (whitespace around it dropped)")
      ->check(CLI::ExistingFile)
      ->excludes(key_opt);
  cmd->add_option("--access-log", a->access_log,
                  "Write one line per request (method, path, status, tokens, latency) to this "
                  "file, appending; '-' for stderr");
  cmd->add_flag("--allow-faults", a->allow_faults,
                "Admit requests that name a fault (known-bug replay, docs/faults.md); without it "
                "they are answered 400");
  cmd->callback([a, &g] { g.exit_code = Serve(*a, g); });
}

}  // namespace nw::cli
