// The http backend in campaigns: `backend: {http: {...}}` parsing and errors, `http` in
// include/exclude, campaigns without a model, tokenizer digests at resolve, and what the job key
// holds (and never holds: paths, timeouts, credentials).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/sha256.h"
#include "coordinator/campaign/campaign.h"
#include "engine/text/tokenizer.h"
#include "task/niah.h"
#include "tests/campaign/campaign_test_util.h"

namespace nw {
namespace {

using ::testing::HasSubstr;
using testing_campaign::TempDir;
using testing_campaign::WriteFile;
using testing_campaign::WriteTinyModel;

class CampaignHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteTinyModel(tmp_.path() / "models" / "tiny");
    auto tok = TrainByteLevelBpe(NiahTokenizerCorpus(3, 40000), 400, {"<bos>", "<eos>"});
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_text_ = tok->dump();
    WriteFile(tokenizer_path(), tokenizer_text_);
  }
  std::filesystem::path tokenizer_path() const { return tmp_.path() / "server" / "tokenizer.json"; }

  Result<Campaign> ParseText(const std::string& text) {
    const auto path = tmp_.path() / "campaigns" / "c.yaml";
    WriteFile(path, text);
    return ParseCampaignFile(path);
  }
  Campaign MustParse(const std::string& text) {
    auto c = ParseText(text);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *std::move(c) : Campaign{};
  }
  std::string ParseError(const std::string& text) {
    auto c = ParseText(text);
    EXPECT_FALSE(c.ok()) << "expected an error for:\n" << text;
    return c.ok() ? "" : c.status().message();
  }
  std::vector<JobSpec> Jobs(const std::string& text) {
    Campaign c = MustParse(text);
    auto r = ResolveCampaign(c);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    auto jobs = ExpandCampaign(*r);
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    return jobs.ok() ? *std::move(jobs) : std::vector<JobSpec>{};
  }

  TempDir tmp_;
  std::string tokenizer_text_;
};

// A campaign whose matrix is `backend: <backend>`, with the model unless `model` is false.
std::string Yaml(const std::string& backend, bool model = true, const std::string& extra = "") {
  return std::string("name: h\n") + (model ? "model: ../models/tiny\n" : "") +
         "matrix:\n  context_length: [256, 512]\n  needle_position: 0.5\n  topk: 16\n"
         "  backend: " +
         backend + "\n" + extra;
}

constexpr const char* kServer =
    "{http: {url: 'http://127.0.0.1:8000', model: tiny, tokenizer: ../server/tokenizer.json}}";

TEST_F(CampaignHttpTest, ParsesTheHttpBackendWithDefaults) {
  Campaign c = MustParse(Yaml(std::string("[cpu, ") + kServer + "]"));
  ASSERT_TRUE(c.http.has_value());
  const HttpBackendSpec& h = c.http->spec;
  EXPECT_EQ(h.url, "http://127.0.0.1:8000");
  EXPECT_EQ(h.model, "tiny");
  EXPECT_EQ(h.api, "completions");
  EXPECT_EQ(h.tokenizer, tokenizer_path().lexically_normal().string());
  EXPECT_TRUE(h.tokenizer_digest.empty());  // filled in by ResolveCampaign
  EXPECT_FALSE(h.engine_params);
  EXPECT_EQ(h.concurrency, 1);
  EXPECT_EQ(h.timeout_ms, 600'000);
  EXPECT_EQ(h.retries, 4);
  EXPECT_EQ(h.health_path, "/health");
  EXPECT_EQ(c.http->where.line, 7);
  ASSERT_EQ(c.matrix[static_cast<size_t>(Axis::kBackend)].size(), 2u);
  EXPECT_EQ(c.matrix[static_cast<size_t>(Axis::kBackend)][1].name(), "http");
  EXPECT_EQ(c.cells.size(), 4u);
}

TEST_F(CampaignHttpTest, ParsesEverySetting) {
  Campaign c = MustParse(Yaml(R"(
    - http:
        url: http://localhost:9000/v1
        model: deepseek-v4
        api: chat
        tokenizer: ../server/tokenizer.json
        headers: {X-Team: nlp, X-Trace: "1"}
        api_key_env: NW_TEST_KEY
        engine_params: true
        concurrency: 8
        timeout_ms: 1000
        retries: 0
        ready_timeout_ms: 0
        health_path: ""
        server_index_topk: 512)"));
  ASSERT_TRUE(c.http.has_value());
  const HttpBackendSpec& h = c.http->spec;
  EXPECT_EQ(h.url, "http://localhost:9000/v1");
  EXPECT_EQ(h.api, "chat");
  EXPECT_EQ(h.headers.at("X-Team"), "nlp");
  EXPECT_EQ(h.headers.at("X-Trace"), "1");
  EXPECT_EQ(h.api_key_env, "NW_TEST_KEY");
  EXPECT_TRUE(h.engine_params);
  EXPECT_EQ(h.concurrency, 8);
  EXPECT_EQ(h.timeout_ms, 1000);
  EXPECT_EQ(h.retries, 0);
  EXPECT_EQ(h.ready_timeout_ms, 0);
  EXPECT_EQ(h.health_path, "");
  EXPECT_EQ(h.server_index_topk, 512);
}

TEST_F(CampaignHttpTest, IncludeAndExcludeNameItHttp) {
  Campaign c = MustParse(Yaml(std::string("[cpu, ") + kServer + "]", true,
                              "exclude:\n  - {backend: http, context_length: 512}\n"));
  EXPECT_EQ(c.cells.size(), 3u);
  // The settings may also come from an include entry, and the same map may be repeated.
  Campaign d = MustParse(Yaml("cpu", true,
                              std::string("include:\n  - {backend: ") + kServer +
                                  ", context_length: 256}\n  - {backend: " + kServer +
                                  ", context_length: 512}\n"));
  ASSERT_TRUE(d.http.has_value());
  EXPECT_EQ(d.cells.size(), 4u);
}

// Without engine_params the server never sees topk or precision: an http backend that sweeps
// them is refused at the value that makes the second configuration (file, line and field named);
// the in-process backends may still sweep them, and engine_params: true allows it.
TEST_F(CampaignHttpTest, SweepingTopkOrPrecisionOnHttpNeedsEngineParams) {
  auto sweep = [](const std::string& backend, const std::string& axis_line) {
    return std::string(
               "name: h\nmodel: ../models/tiny\nmatrix:\n  context_length: [256]\n"
               "  needle_position: 0.5\n") +
           axis_line + "  backend: " + backend + "\n";
  };
  const std::string topk = ParseError(sweep(kServer, "  topk: [16, 32]\n"));
  EXPECT_THAT(topk, HasSubstr("c.yaml:6:14: "));  // line 6: topk, column 14: its 32
  EXPECT_THAT(topk, HasSubstr("matrix.topk[1]: the http backend"));
  EXPECT_THAT(topk, HasSubstr("does not send topk to the server (engine_params is false)"));
  EXPECT_THAT(topk, HasSubstr("topk 16 and 32"));
  const std::string precision =
      ParseError(sweep(kServer, "  topk: 16\n  precision: [fp32, fp8-index]\n"));
  EXPECT_THAT(precision, HasSubstr("matrix.precision[1]: the http backend"));
  EXPECT_THAT(precision, HasSubstr("precision fp32 and fp8-index"));
  // An include entry that adds a top-k to the http cells is refused at the entry.
  const std::string include =
      ParseError(sweep(kServer, "  topk: 16\n") + "include:\n  - {backend: http, topk: 64}\n");
  EXPECT_THAT(include, HasSubstr("include[0].topk: the http backend"));

  // The CPU cells may sweep them when http keeps one value ...
  Campaign mixed = MustParse(sweep(std::string("[cpu, ") + kServer + "]", "  topk: [16, 32]\n") +
                             "exclude:\n  - {backend: http, topk: 32}\n");
  EXPECT_EQ(mixed.cells.size(), 3u);
  // ... and a server that takes them (nw serve) may sweep them too.
  Campaign served = MustParse(sweep(
      "{http: {url: 'http://127.0.0.1:8000', model: tiny, tokenizer: ../server/tokenizer.json, "
      "engine_params: true}}",
      "  topk: [16, 32]\n  precision: [fp32, bf16]\n"));
  EXPECT_EQ(served.cells.size(), 4u);
}

TEST_F(CampaignHttpTest, RejectsBadSettingsWithLocations) {
  EXPECT_THAT(ParseError(Yaml("{http: {model: tiny}}")),
              HasSubstr("matrix.backend.http: missing url"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h:1'}}")), HasSubstr("missing model"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'ftp://api.example.com/v1', model: m}}")),
              HasSubstr("matrix.backend.http.url: must start with http:// or https://"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h:99999', model: m}}")),
              HasSubstr("bad port '99999'"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h:80/api', model: m}}")),
              HasSubstr("the path must be empty or /v1"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://user:pw@h:80', model: m}}")),
              HasSubstr("credentials do not belong in the URL"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m, api: generate}}")),
              HasSubstr("matrix.backend.http.api: must be completions or chat"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m, timout_ms: 5}}")),
              HasSubstr("unknown key 'timout_ms'; did you mean 'timeout_ms'?"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m, concurrency: 0}}")),
              HasSubstr("concurrency: must be >= 1"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m}, other: 1}")),
              HasSubstr("unknown key 'other'"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m, health_path: health}}")),
              HasSubstr("must be empty or a path starting with /"));
  EXPECT_THAT(
      ParseError(Yaml("{http: {url: 'http://h', model: m, api_key_env: A, api_key_file: k}}")),
      HasSubstr("give api_key_env or api_key_file, not both"));
}

TEST_F(CampaignHttpTest, SecretsAreRefused) {
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m, api_key_env: sk-abc123}}")),
              HasSubstr("must be the name of an environment variable"));
  EXPECT_THAT(
      ParseError(Yaml("{http: {url: 'http://h', model: m, headers: {Authorization: Bearer x}}}")),
      HasSubstr("credentials never go in the campaign file"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m, headers: {x-api-key: k}}}")),
              HasSubstr("credentials never go in the campaign file"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m, headers: {Host: k}}}")),
              HasSubstr("is set by the client"));
}

TEST_F(CampaignHttpTest, HttpNeedsItsSettingsAndThereIsOnlyOneServer) {
  EXPECT_THAT(ParseError(Yaml("[cpu, http]")),
              HasSubstr("c.yaml:7:18: matrix.backend[1]: backend 'http' needs its settings"));
  EXPECT_THAT(
      ParseError(Yaml(std::string("[") + kServer +
                      ", {http: {url: 'http://127.0.0.1:8001', model: tiny}}]")),
      HasSubstr("a campaign evaluates one http backend; this one differs from matrix.backend[0]"));
  // The old errors are unchanged.
  EXPECT_THAT(ParseError(Yaml("[cpu, tpu]")),
              HasSubstr("unknown backend 'tpu' (expected cpu, cpu-paged, cpu-pd, cuda, cuda-paged, "
                        "cuda-pd)"));
  EXPECT_THAT(ParseError(Yaml("{linear: {from: 1, to: 2, step: 1}}")),
              HasSubstr("matrix.backend: must be a name or a list of names, got a map"));
  ParseOptions no_http;
  no_http.allow_http = false;
  WriteFile(tmp_.path() / "x.yaml", Yaml(kServer));
  auto c = ParseCampaignFile(tmp_.path() / "x.yaml", no_http);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("must be a name or a list of names"));
}

TEST_F(CampaignHttpTest, TheModelIsOptionalOnlyWhenEveryCellRunsOnHttp) {
  Campaign c = MustParse(Yaml(kServer, /*model=*/false));
  EXPECT_TRUE(c.model.empty());
  EXPECT_THAT(ParseError(Yaml(std::string("[cpu, ") + kServer + "]", false)),
              HasSubstr("missing required field 'model'"));
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h', model: m}}", false)),
              HasSubstr("tokenizer: required when the campaign has no model"));
  // Excluding every non-http cell is enough.
  MustParse(Yaml(std::string("[cpu, ") + kServer + "]", false, "exclude:\n  - {backend: cpu}\n"));
}

TEST_F(CampaignHttpTest, ResolveRecordsTheTokenizerDigestAndExpandCarriesTheSettings) {
  auto jobs = Jobs(Yaml(kServer, /*model=*/false));
  ASSERT_EQ(jobs.size(), 2u);
  for (const JobSpec& j : jobs) {
    EXPECT_EQ(j.backend, "http");
    ASSERT_TRUE(j.http.has_value());
    EXPECT_EQ(j.http->tokenizer_digest, Sha256Hex(tokenizer_text_));
    EXPECT_EQ(j.model_digest, "");
    EXPECT_EQ(j.model_dir, "");
    auto back = JobSpec::FromJson(j.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->Key(), j.Key());
    EXPECT_EQ(back->http, j.http);
  }
  // A campaign with a model may leave the tokenizer out: the model's is used (and must load).
  Campaign c = MustParse(Yaml("{http: {url: 'http://h', model: m}}"));
  auto r = ResolveCampaign(c);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("tokenizer (the model's)"));
  EXPECT_THAT(r.status().message(), HasSubstr("models/tiny/tokenizer.json"));

  // A missing tokenizer file is reported at its field.
  Campaign m = MustParse(
      Yaml("{http: {url: 'http://h', model: m, tokenizer: ../server/nothing.json}}", false));
  auto rm = ResolveCampaign(m);
  ASSERT_FALSE(rm.ok());
  EXPECT_THAT(rm.status().message(), HasSubstr("c.yaml:6:"));
  EXPECT_THAT(rm.status().message(), HasSubstr("matrix.backend.http.tokenizer: "));
  EXPECT_THAT(rm.status().message(), HasSubstr("nothing.json"));
}

TEST_F(CampaignHttpTest, TheKeyHoldsWhatIdentifiesResultsAndNothingElse) {
  auto base = Jobs(Yaml(kServer, false));
  ASSERT_EQ(base.size(), 2u);
  const std::string key = base[0].Key();

  // How the server is reached does not change the key ...
  auto how = Jobs(Yaml(
      "{http: {url: 'http://127.0.0.1:8000', model: tiny, tokenizer: ../server/tokenizer.json, "
      "timeout_ms: 5, retries: 9, concurrency: 3, ready_timeout_ms: 7, health_path: /ready, "
      "headers: {X-A: b}, api_key_env: SOME_KEY}}",
      false));
  ASSERT_EQ(how.size(), 2u);
  EXPECT_EQ(how[0].Key(), key);
  // ... what is evaluated does.
  for (const std::string& change :
       {std::string("url: 'http://127.0.0.1:8001'"), std::string("url: 'http://127.0.0.1:8000/v1'"),
        std::string("url: 'http://127.0.0.1:8000', api: chat"),
        std::string("url: 'http://127.0.0.1:8000', engine_params: true")}) {
    auto other = Jobs(
        Yaml("{http: {" + change + ", model: tiny, tokenizer: ../server/tokenizer.json}}", false));
    ASSERT_EQ(other.size(), 2u);
    EXPECT_NE(other[0].Key(), key) << change;
  }
  auto other_model = Jobs(Yaml(
      "{http: {url: 'http://127.0.0.1:8000', model: big, tokenizer: ../server/tokenizer.json}}",
      false));
  ASSERT_EQ(other_model.size(), 2u);
  EXPECT_NE(other_model[0].Key(), key);

  // The key JSON has no paths, timeouts or credential sources.
  JobSpec j = how[0];
  const std::string key_json = j.http->KeyJson().dump();
  EXPECT_EQ(key_json.find("tokenizer\""), std::string::npos);
  EXPECT_EQ(key_json.find("SOME_KEY"), std::string::npos);
  EXPECT_EQ(key_json.find("timeout"), std::string::npos);
  EXPECT_NE(key_json.find(j.http->tokenizer_digest), std::string::npos);

  // A changed tokenizer file is a new key.
  WriteFile(tokenizer_path(), tokenizer_text_ + "\n");
  auto changed = Jobs(Yaml(kServer, false));
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_NE(changed[0].Key(), key);
}

TEST_F(CampaignHttpTest, StreamSamplingAndHttpsAreParsed) {
  WriteFile(tmp_.path() / "campaigns" / "ca.pem", "not read at parse time");
  Campaign c = MustParse(
      Yaml("{http: {url: 'https://api.example.com/v1', model: tiny, stream: true, ca_file: ca.pem, "
           "sampling: {temperature: 0.7, top_p: 0.9, top_k: 40, seed: 7, min_tokens: 2}}}"));
  ASSERT_TRUE(c.http.has_value());
  const HttpBackendSpec& h = c.http->spec;
  EXPECT_EQ(h.url, "https://api.example.com/v1");
  EXPECT_TRUE(h.stream);
  EXPECT_EQ(h.ca_file, (tmp_.path() / "campaigns" / "ca.pem").string());
  EXPECT_EQ(h.sampling.temperature, 0.7);
  EXPECT_EQ(h.sampling.top_p, 0.9);
  EXPECT_EQ(h.sampling.top_k, 40);
  EXPECT_EQ(h.sampling.seed, 7);
  EXPECT_EQ(h.sampling.min_tokens, 2);
  EXPECT_EQ(h.sampling.ToJson().dump(),
            R"({"min_tokens":2,"seed":7,"temperature":0.7,"top_k":40,"top_p":0.9})");
  // The spec travels to workers and back unchanged.
  auto back = HttpBackendSpec::FromJson(h.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == h);
  // Defaults: no stream, no sampling, no CA file, and none of them in the spec's JSON.
  Campaign d = MustParse(Yaml(kServer));
  EXPECT_FALSE(d.http->spec.stream);
  EXPECT_TRUE(d.http->spec.sampling.empty());
  const nlohmann::json dj = d.http->spec.ToJson();
  EXPECT_FALSE(dj.contains("stream") || dj.contains("sampling") || dj.contains("ca_file"));
}

TEST_F(CampaignHttpTest, BadStreamSamplingAndCaSettingsNameTheField) {
  auto http = [](const std::string& more) {
    return Yaml("{http: {url: 'http://h:1', model: m, " + more + "}}");
  };
  EXPECT_THAT(ParseError(http("sampling: {temperature: 3}")),
              HasSubstr("matrix.backend.http.sampling.temperature: must be in 0..2"));
  EXPECT_THAT(ParseError(http("sampling: {temperature: 1, top_p: 0}")),
              HasSubstr("matrix.backend.http.sampling.top_p: must be in (0, 1]"));
  EXPECT_THAT(ParseError(http("sampling: {temperature: 1, top_k: 0}")),
              HasSubstr("matrix.backend.http.sampling.top_k: must be >= 1"));
  EXPECT_THAT(ParseError(http("sampling: {temperature: 1, seed: -1}")),
              HasSubstr("matrix.backend.http.sampling.seed: must be >= 0"));
  EXPECT_THAT(ParseError(http("sampling: {temperature: 1, seed: x}")),
              HasSubstr("matrix.backend.http.sampling.seed: must be an integer"));
  EXPECT_THAT(ParseError(http("sampling: {min_tokens: 5000}")),
              HasSubstr("matrix.backend.http.sampling.min_tokens: must be <= 4096"));
  EXPECT_THAT(ParseError(http("sampling: {temprature: 1}")),
              HasSubstr("unknown key 'temprature'; did you mean 'temperature'?"));
  EXPECT_THAT(ParseError(http("sampling: {max_tokens: 8}")),
              HasSubstr("sampling.max_tokens: the number of tokens to generate is "
                        "generation.max_new_tokens"));
  EXPECT_THAT(ParseError(http("sampling: {top_p: 0.5}")),
              HasSubstr("sampling.top_p: has no effect at temperature 0"));
  EXPECT_THAT(ParseError(http("sampling: {temperature: 0, seed: 3}")),
              HasSubstr("sampling.seed: has no effect at temperature 0"));
  EXPECT_THAT(ParseError(http("sampling: 0.5")), HasSubstr("matrix.backend.http.sampling"));
  EXPECT_THAT(ParseError(http("stream: yes please")),
              HasSubstr("matrix.backend.http.stream: must be true or false"));
  EXPECT_THAT(ParseError(http("ca_file: ca.pem")),
              HasSubstr("ca_file is for https:// URLs; this url is http://h:1"));
  // Probes need the whole answer's indexer top-k: a streamed campaign cannot probe.
  EXPECT_THAT(ParseError(Yaml("{http: {url: 'http://h:1', model: m, stream: true}}", true,
                              "probe: true\n")),
              HasSubstr("matrix.backend.http.stream: a streamed answer carries no indexer top-k"));
}

TEST_F(CampaignHttpTest, SamplingAndStreamJoinTheKeyOnlyWhenSet) {
  auto base = Jobs(Yaml(kServer, false));
  ASSERT_EQ(base.size(), 2u);
  // Without them the key JSON is exactly what it was before they existed, so every existing
  // http job key is unchanged.
  std::vector<std::string> fields;
  const nlohmann::json key_json = base[0].http->KeyJson();
  for (const auto& [k, v] : key_json.items()) fields.push_back(k);
  EXPECT_EQ(fields,
            (std::vector<std::string>{"api", "engine_params", "model", "tokenizer_digest", "url"}));
  std::set<std::string> keys{base[0].Key()};
  for (const std::string& more :
       {std::string("stream: true"), std::string("sampling: {temperature: 0.7}"),
        std::string("sampling: {temperature: 0.7, seed: 1}"),
        std::string("sampling: {temperature: 0.7, seed: 2}"),
        std::string("sampling: {min_tokens: 1}")}) {
    auto jobs = Jobs(Yaml(
        "{http: {url: 'http://127.0.0.1:8000', model: tiny, tokenizer: ../server/tokenizer.json, " +
            more + "}}",
        false));
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_TRUE(keys.insert(jobs[0].Key()).second) << more << " did not change the key";
  }
  // stream: false and an empty sampling map are the defaults: the same key.
  auto same = Jobs(Yaml(
      "{http: {url: 'http://127.0.0.1:8000', model: tiny, tokenizer: ../server/tokenizer.json, "
      "stream: false, sampling: {}}}",
      false));
  ASSERT_EQ(same.size(), 2u);
  EXPECT_EQ(same[0].Key(), base[0].Key());
  // The CA file is how the server is reached, not what is evaluated.
  WriteFile(tmp_.path() / "campaigns" / "ca.pem", "x");
  auto a =
      Jobs(Yaml("{http: {url: 'https://127.0.0.1:8000', model: tiny, "
                "tokenizer: ../server/tokenizer.json}}",
                false));
  auto b =
      Jobs(Yaml("{http: {url: 'https://127.0.0.1:8000', model: tiny, "
                "tokenizer: ../server/tokenizer.json, ca_file: ca.pem}}",
                false));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0].Key(), b[0].Key());
  EXPECT_NE(a[0].Key(), base[0].Key());  // https://... is another URL
}

TEST_F(CampaignHttpTest, OtherJobsAreUnchangedAndHttpJobsShareTheCpuHaystack) {
  auto jobs = Jobs(Yaml(std::string("[cpu, ") + kServer + "]"));
  ASSERT_EQ(jobs.size(), 4u);
  std::set<std::string> keys;
  for (const JobSpec& j : jobs) keys.insert(j.Key());
  EXPECT_EQ(keys.size(), 4u);
  const JobSpec& cpu = jobs[0];
  const JobSpec& http = jobs[2];
  ASSERT_EQ(cpu.backend, "cpu");
  ASSERT_EQ(http.backend, "http");
  ASSERT_EQ(cpu.context_length, http.context_length);
  EXPECT_FALSE(cpu.ToJson().contains("http"));
  EXPECT_FALSE(cpu.http.has_value());
  // The http job gets the prompt of its cpu twin (and so the cpu job's answers compare one to
  // one), but a key of its own; another design point (length) gets another prompt.
  EXPECT_EQ(http.HaystackSeed(), cpu.HaystackSeed());
  EXPECT_NE(http.Key(), cpu.Key());
  ASSERT_NE(jobs[1].context_length, cpu.context_length);
  EXPECT_NE(jobs[1].HaystackSeed(), cpu.HaystackSeed());

  // A cpu job spec without the http field reads back unchanged, and an http job needs it.
  nlohmann::json j = http.ToJson();
  j.erase("http");
  auto bad = JobSpec::FromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("job.http: missing"));
}

}  // namespace
}  // namespace nw
