#include "report/export.h"

#include <nlohmann/json.hpp>

#include "report/escape.h"

namespace nw::report {
namespace {

using ojson = nlohmann::ordered_json;

std::string CsvValue(const ojson& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return CsvField(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  return v.dump();
}

ojson ProbesJson(const std::vector<ProbeSummary>& probes) {
  ojson out = ojson::array();
  for (const ProbeSummary& p : probes) {
    out.push_back({{"layer", p.layer},
                   {"positions", p.positions},
                   {"needle_rank_min", p.needle_rank_min},
                   {"needle_rank_median", p.needle_rank_median},
                   {"in_topk_fraction", p.in_topk_fraction},
                   {"in_topk_last", p.in_topk_last},
                   {"topk", p.topk}});
  }
  return out;
}

}  // namespace

Result<ExportFormat> ParseExportFormat(const std::string& name) {
  if (name == "csv") return ExportFormat::kCsv;
  if (name == "jsonl" || name == "jsonlines" || name == "ndjson") return ExportFormat::kJsonl;
  return Status::InvalidArgument("--format must be csv or jsonl, not '" + name + "'");
}

const std::vector<std::string>& ExportColumns() {
  static const std::vector<std::string> kColumns = {"campaign",
                                                    "job_key",
                                                    "config",
                                                    "model_digest",
                                                    "engine_version",
                                                    "task",
                                                    "haystack",
                                                    "context_length",
                                                    "needle_position",
                                                    "topk",
                                                    "precision",
                                                    "backend",
                                                    "seed",
                                                    "trial",
                                                    "max_new_tokens",
                                                    "state",
                                                    "attempts",
                                                    "result_id",
                                                    "result_attempt",
                                                    "outcome",
                                                    "expected",
                                                    "generated_text",
                                                    "needle_token_offset",
                                                    "prompt_hash",
                                                    "prompt_tokens",
                                                    "generated_tokens",
                                                    "prefill_ms",
                                                    "decode_ms",
                                                    "total_ms",
                                                    "worker_id",
                                                    "device",
                                                    "result_engine_version",
                                                    "error_code",
                                                    "error_message",
                                                    "retryable",
                                                    "result_created_ms",
                                                    "ttft_ms",
                                                    "tpot_ms",
                                                    "itl_p50_ms",
                                                    "itl_p95_ms",
                                                    "stream_events"};
  return kColumns;
}

ojson ExportRow(const std::string& campaign, const CampaignSample& s, bool with_probes) {
  const JobSpec& spec = s.job.spec;
  ojson row = ojson::object();
  row["campaign"] = campaign;
  row["job_key"] = s.job.key;
  row["config"] = s.config;
  row["model_digest"] = spec.model_digest;
  row["engine_version"] = spec.engine_version;
  row["task"] = spec.task;
  row["haystack"] = spec.haystack;
  row["context_length"] = spec.context_length;
  row["needle_position"] = spec.needle_position;
  row["topk"] = spec.topk;
  row["precision"] = spec.precision.name;
  row["backend"] = spec.backend;
  row["seed"] = spec.seed;
  row["trial"] = spec.trial;
  row["max_new_tokens"] = spec.max_new_tokens;
  row["state"] = std::string(JobStateName(s.job.state));
  row["attempts"] = s.job.attempts;
  const std::optional<JobResult>& r = s.result;
  auto opt = [&r](auto f) -> ojson { return r ? ojson(f(*r)) : ojson(nullptr); };
  row["result_id"] = r ? ojson(s.result_id) : ojson(nullptr);
  row["result_attempt"] = opt([](const JobResult& x) { return x.attempt; });
  row["outcome"] = opt([](const JobResult& x) { return std::string(OutcomeName(x.outcome)); });
  row["expected"] = opt([](const JobResult& x) { return x.expected; });
  row["generated_text"] = opt([](const JobResult& x) { return x.generated_text; });
  row["needle_token_offset"] = opt([](const JobResult& x) { return x.needle_token_offset; });
  row["prompt_hash"] = opt([](const JobResult& x) { return x.prompt_hash; });
  row["prompt_tokens"] = opt([](const JobResult& x) { return x.prompt_tokens; });
  row["generated_tokens"] = opt([](const JobResult& x) { return x.generated_tokens; });
  row["prefill_ms"] = opt([](const JobResult& x) { return x.prefill_ms; });
  row["decode_ms"] = opt([](const JobResult& x) { return x.decode_ms; });
  row["total_ms"] = opt([](const JobResult& x) { return x.total_ms; });
  row["worker_id"] = opt([](const JobResult& x) { return x.worker_id; });
  row["device"] = opt([](const JobResult& x) { return x.device; });
  row["result_engine_version"] = opt([](const JobResult& x) { return x.engine_version; });
  row["error_code"] = opt([](const JobResult& x) { return x.error_code; });
  row["error_message"] = opt([](const JobResult& x) { return x.error_message; });
  row["retryable"] = opt([](const JobResult& x) { return x.retryable; });
  row["result_created_ms"] = r ? ojson(s.result_created_ms) : ojson(nullptr);
  // Streamed http results only (null otherwise).
  const StreamTiming* st = r && r->stream ? &*r->stream : nullptr;
  row["ttft_ms"] = st ? ojson(st->ttft_ms) : ojson(nullptr);
  row["tpot_ms"] = st ? ojson(st->tpot_ms) : ojson(nullptr);
  row["itl_p50_ms"] = st ? ojson(st->itl_p50_ms) : ojson(nullptr);
  row["itl_p95_ms"] = st ? ojson(st->itl_p95_ms) : ojson(nullptr);
  row["stream_events"] = st ? ojson(st->events) : ojson(nullptr);
  if (with_probes) row["probes"] = r ? ProbesJson(r->probes) : ojson::array();
  return row;
}

Result<int64_t> ExportCampaign(Store& store, const std::string& campaign_name, ExportFormat format,
                               std::ostream& out) {
  std::vector<CampaignSample> samples;
  const Status st = store.InReadTransaction([&]() -> Status {
    NW_ASSIGN_OR_RETURN(std::optional<CampaignRecord> c, store.FindCampaign(campaign_name));
    if (!c) {
      return Status::NotFound(store.path().string() + ": no campaign named '" + campaign_name +
                              "' in table campaigns");
    }
    NW_ASSIGN_OR_RETURN(samples, store.CampaignSamples(c->id, format == ExportFormat::kJsonl));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  const std::vector<std::string>& columns = ExportColumns();
  if (format == ExportFormat::kCsv) {
    for (size_t i = 0; i < columns.size(); ++i) out << (i > 0 ? "," : "") << columns[i];
    out << "\n";
  }
  for (const CampaignSample& s : samples) {
    const ojson row = ExportRow(campaign_name, s, format == ExportFormat::kJsonl);
    if (format == ExportFormat::kCsv) {
      for (size_t i = 0; i < columns.size(); ++i) {
        out << (i > 0 ? "," : "") << CsvValue(row.at(columns[i]));
      }
      out << "\n";
    } else {
      // Model output that is not valid UTF-8 is written with U+FFFD rather than failing.
      out << row.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
    }
  }
  if (!out) return Status::IoError("writing the export failed");
  return static_cast<int64_t>(samples.size());
}

}  // namespace nw::report
