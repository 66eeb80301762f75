// serve_batch_bench: what continuous batching buys `nw serve`, in one process.
//
//   1. Engine: one decode step for B sequences (cpu::DecodeBatch, one pass over the weights)
//      against B single-sequence decode steps, per batch size.
//   2. Server: N concurrent clients, each sending one completion request (a NIAH prompt of P
//      tokens, T generated tokens, greedy, ignore_eos) to an in-process HttpServer on loopback,
//      once with --max-running-requests 1 (one request at a time, the baseline) and once with
//      --max-running-requests N (batched); throughput (generated tokens/s, requests/s) and
//      per-request latency (arrival to answer).
//
// Usage: serve_batch_bench [--model DIR] [--requests N] [--prompt P] [--max-tokens T]
//                          [--backend cpu|cpu-paged]
// Defaults: models/tiny-v4 (relative to the working directory), N=16, P=128, T=64, cpu.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "engine/cpu/batch.h"
#include "engine/cpu/sequence.h"
#include "engine/engine.h"
#include "http/client.h"
#include "http/server.h"
#include "task/niah.h"

namespace nw {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Args {
  std::filesystem::path model = "models/tiny-v4";
  int requests = 16;
  int64_t prompt = 128;
  int max_tokens = 64;
  std::string backend = "cpu";
};

// Parses the command line (CLI11); exits 0 after --help, 2 on a bad option or value.
Args ParseArgs(int argc, char** argv) {
  Args a;
  std::string model = a.model.string();
  CLI::App app{"What continuous batching buys nw serve, in one process"};
  app.add_option("--model", model, "Model folder")->capture_default_str();
  app.add_option("--requests", a.requests, "Concurrent requests")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--prompt", a.prompt, "Prompt tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-tokens", a.max_tokens, "Generated tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--backend", a.backend, "Engine backend")
      ->check(CLI::IsMember({"cpu", "cpu-paged"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  a.model = model;
  return a;
}

std::vector<std::vector<int32_t>> Prompts(const Tokenizer& tok, const Args& a) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < a.requests; ++i) {
    NiahSpec ns;
    ns.context_length = a.prompt;
    ns.seed = 1000 + static_cast<uint64_t>(i);
    auto p = BuildNiahPrompt(tok, ns);
    if (!p.ok()) {
      std::fprintf(stderr, "prompt: %s\n", p.status().ToString().c_str());
      std::exit(2);
    }
    out.push_back(p->tokens);
  }
  return out;
}

// 1. Decode steps: batched against one sequence at a time, on the same prefilled sequences.
void EngineSteps(const Args& a, const std::vector<std::vector<int32_t>>& prompts) {
  auto loaded = LoadModelFolder(a.model);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
    std::exit(2);
  }
  const ModelConfig& cfg = loaded->config;
  const int steps = 32;
  std::printf("engine decode steps (%s, prompt %lld, %d steps per batch size)\n",
              a.model.string().c_str(), static_cast<long long>(a.prompt), steps);
  std::printf("%6s %14s %14s %12s %12s %8s\n", "batch", "one-by-one ms", "batched ms", "one tok/s",
              "batch tok/s", "speedup");
  for (int B : {1, 2, 4, 8, 16, 32}) {
    if (B > a.requests) break;
    std::vector<cpu::Sequence> seqs;
    std::vector<float> logits;
    for (int i = 0; i < B; ++i) {
      cpu::SequenceOptions so;
      so.max_tokens = a.prompt + 2 * steps + 1;
      auto s = cpu::Sequence::Create(cfg, loaded->weights, so);
      if (!s.ok() || !s->Prefill(prompts[static_cast<size_t>(i)], &logits).ok()) std::exit(2);
      seqs.push_back(*std::move(s));
    }
    // Alternate the two ways step by step so that both see the same cache lengths.
    double one_s = 0, batch_s = 0;
    std::vector<cpu::Sequence*> ptrs;
    for (auto& s : seqs) ptrs.push_back(&s);
    std::vector<int32_t> tokens(static_cast<size_t>(B), 7);
    for (int step = 0; step < steps; ++step) {
      auto t0 = Clock::now();
      for (auto* s : ptrs) {
        if (!s->Decode(7, &logits).ok()) std::exit(2);
      }
      auto t1 = Clock::now();
      if (!cpu::DecodeBatch(ptrs, tokens, &logits).ok()) std::exit(2);
      auto t2 = Clock::now();
      one_s += Seconds(t1 - t0);
      batch_s += Seconds(t2 - t1);
    }
    std::printf("%6d %14.3f %14.3f %12.0f %12.0f %7.2fx\n", B, 1e3 * one_s / steps,
                1e3 * batch_s / steps, B * steps / one_s, B * steps / batch_s, one_s / batch_s);
  }
}

struct RunFigures {
  double wall_s = 0;
  int64_t tokens = 0;
  std::vector<double> latency_s;
  int64_t max_decode_batch = 0;
};

// 2. N concurrent requests through the HTTP server.
RunFigures ServeRun(const Args& a, const std::vector<std::vector<int32_t>>& prompts,
                    int max_running) {
  auto model = ServeModel::Load(a.model, a.backend);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    std::exit(2);
  }
  HttpServerOptions o;
  o.listen = "127.0.0.1:0";
  o.model_name = "bench";
  o.max_batch = 2 * a.requests;
  o.max_running = max_running;
  o.max_batched_tokens = std::max<int64_t>(256, 2 * max_running);
  auto server = HttpServer::Start(*std::move(model), o);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    std::exit(2);
  }
  auto url = HttpUrl::Parse((*server)->url());
  if (!url.ok()) std::exit(2);
  HttpClientOptions co;
  co.max_in_flight = a.requests;
  HttpClient client(*url, co);
  RunFigures f;
  std::vector<std::future<std::pair<double, int64_t>>> done;
  const auto t0 = Clock::now();
  for (const auto& p : prompts) {
    const std::string body = json{
        {"prompt", p},
        {"max_tokens", a.max_tokens},
        {"temperature", 0},
        {"ignore_eos", true}}.dump();
    done.push_back(std::async(std::launch::async, [&client, body] {
      const auto s = Clock::now();
      auto r = client.Send("POST", "/v1/completions", body, std::chrono::seconds(3600));
      if (!r.ok() || r->status != 200) {
        std::fprintf(stderr, "request failed: %s\n",
                     r.ok() ? r->body.c_str() : r.status().ToString().c_str());
        std::exit(2);
      }
      const json j = json::parse(r->body);
      return std::pair<double, int64_t>(Seconds(Clock::now() - s),
                                        j["usage"]["completion_tokens"].get<int64_t>());
    }));
  }
  for (auto& d : done) {
    auto [latency, tokens] = d.get();
    f.latency_s.push_back(latency);
    f.tokens += tokens;
  }
  f.wall_s = Seconds(Clock::now() - t0);
  f.max_decode_batch = (*server)->stats().scheduler.max_decode_batch;
  (*server)->Stop();
  std::sort(f.latency_s.begin(), f.latency_s.end());
  return f;
}

void PrintRun(const char* name, const RunFigures& f, int n) {
  const double mean =
      std::accumulate(f.latency_s.begin(), f.latency_s.end(), 0.0) / static_cast<double>(n);
  std::printf("%-22s %8.2f %10.1f %8.2f %9.2f %9.2f %9.2f %6lld\n", name, f.wall_s,
              static_cast<double>(f.tokens) / f.wall_s, n / f.wall_s, mean,
              f.latency_s[f.latency_s.size() / 2], f.latency_s.back(),
              static_cast<long long>(f.max_decode_batch));
}

}  // namespace
}  // namespace nw

int main(int argc, char** argv) {
  const nw::Args a = nw::ParseArgs(argc, argv);
  auto tok = nw::Tokenizer::Load(a.model / "tokenizer.json");
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 2;
  }
  const auto prompts = nw::Prompts(*tok, a);
  nw::EngineSteps(a, prompts);
  std::printf("\nnw serve, %d concurrent requests (prompt %lld, %d generated tokens each, %s)\n",
              a.requests, static_cast<long long>(a.prompt), a.max_tokens, a.backend.c_str());
  std::printf("%-22s %8s %10s %8s %9s %9s %9s %6s\n", "mode", "wall s", "tok/s", "req/s",
              "lat mean", "lat p50", "lat max", "batch");
  const auto one = nw::ServeRun(a, prompts, 1);
  nw::PrintRun("one at a time", one, a.requests);
  const auto batched = nw::ServeRun(a, prompts, a.requests);
  nw::PrintRun("batched", batched, a.requests);
  std::printf("throughput: %.2fx tokens/s, %.2fx requests/s; mean latency %.2fx\n",
              one.wall_s / batched.wall_s, one.wall_s / batched.wall_s,
              (std::accumulate(batched.latency_s.begin(), batched.latency_s.end(), 0.0)) /
                  std::accumulate(one.latency_s.begin(), one.latency_s.end(), 0.0));
  return 0;
}
