// Store: the report views of one campaign (progress, heatmap, boundaries, outcome counts,
// failure reasons, probe statistics) and the timing history `nw plan` estimates from.
#include <string>
#include <utility>
#include <vector>

#include "db/rows.h"
#include "db/sqlite.h"
#include "db/store.h"
#include "db/store_impl.h"

namespace nw {

using db_internal::Columns;
using db_internal::Query;
using db_internal::ReadOptionalRow;
using db_internal::ReadRows;

Result<CampaignProgress> Store::Progress(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  CampaignProgress p;
  {
    Query q(*impl_->db,
            "SELECT COUNT(*), SUM(j.state = 'queued'), SUM(j.state = 'leased'),"
            " SUM(j.state = 'done'), SUM(j.state = 'failed')"
            " FROM jobs j JOIN campaign_jobs cj ON cj.job_key = j.key WHERE cj.campaign_id = ?",
            "counting the jobs of campaign " + std::to_string(campaign_id));
    q.Bind(1, campaign_id);
    NW_RETURN_IF_ERROR(ReadOptionalRow(q, [&p](const Query& r) {
                         Columns(r).Into(p.total, p.queued, p.leased, p.done, p.failed);
                         return true;
                       }).status());
  }
  Query q(*impl_->db,
          "SELECT outcome, COUNT(*) FROM v_campaign_jobs"
          " WHERE campaign_id = ? AND state = 'done' AND outcome IS NOT NULL GROUP BY outcome",
          "counting the outcomes of campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  NW_ASSIGN_OR_RETURN(
      auto counts, ReadRows(q, [](const Query& r) { return std::make_pair(r.Text(0), r.Int(1)); }));
  for (const auto& [outcome, n] : counts) {
    if (outcome == "pass") {
      p.pass += n;
    } else if (outcome == "miss") {
      p.miss += n;
    } else {
      p.other += n;
    }
  }
  return p;
}

Result<std::vector<HeatmapCell>> Store::Heatmap(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, context_length, needle_position, trials, passes, errors, pending,"
          " failed FROM v_heatmap WHERE campaign_id = ?"
          " ORDER BY config, context_length, needle_position",
          "reading view v_heatmap for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return ReadRows(q, [](const Query& r) {
    HeatmapCell c;
    Columns(r).Into(c.config, c.context_length, c.needle_position, c.trials, c.passes, c.errors,
                    c.pending, c.failed);
    return c;
  });
}

Result<std::vector<BoundaryRow>> Store::Boundaries(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, lengths, min_length, max_length, l_pass, l_fail, first_unclean,"
          " max_clean, monotone, fail_trials, fail_passes, trials, passes, errors, pending,"
          " failed FROM v_boundary WHERE campaign_id = ? ORDER BY config",
          "reading view v_boundary for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return ReadRows(q, [](const Query& r) {
    BoundaryRow b;
    Columns(r).Into(b.config, b.lengths, b.min_length, b.max_length, b.l_pass, b.l_fail,
                    b.first_unclean, b.max_clean, b.monotone, b.fail_trials, b.fail_passes,
                    b.trials, b.passes, b.errors, b.pending, b.failed);
    return b;
  });
}

Result<std::vector<OutcomeCount>> Store::OutcomeCounts(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, outcome, COUNT(*) FROM v_campaign_jobs"
          " WHERE campaign_id = ? AND outcome IS NOT NULL GROUP BY config, outcome"
          " ORDER BY config, outcome",
          "counting outcomes per configuration for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return ReadRows(q, [&](const Query& r) -> Result<OutcomeCount> {
    OutcomeCount c;
    c.config = r.Text(0);
    auto outcome = ParseOutcome(r.Text(1));
    if (!outcome.ok()) {
      return Status::Corruption(impl_->file() + ": table results: " + outcome.status().message());
    }
    c.outcome = *outcome;
    c.count = r.Int(2);
    return c;
  });
}

Result<std::vector<FailureReason>> Store::FailureReasons(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, kind, reason, COUNT(*) AS n FROM v_job_failures WHERE campaign_id = ?"
          " GROUP BY config, kind, reason ORDER BY config, n DESC, kind, reason",
          "reading view v_job_failures for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return ReadRows(q, [](const Query& r) {
    FailureReason f;
    Columns(r).Into(f.config, f.kind, f.reason, f.jobs);
    return f;
  });
}

Result<std::optional<GpuBusySummary>> Store::CampaignGpuBusy(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db, "SELECT results, total_ms, gpu_busy FROM v_gpu_busy WHERE campaign_id = ?",
          "reading view v_gpu_busy for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return ReadOptionalRow(q, [](const Query& r) {
    GpuBusySummary g;
    Columns(r).Into(g.results, g.total_ms, g.gpu_busy);
    return g;
  });
}

Result<std::vector<BackendTiming>> Store::TimingHistory() {
  Query q(*impl_->db,
          "SELECT backend, SUM(total_ms) / SUM(prompt_tokens), COUNT(*) FROM v_results"
          " WHERE outcome IN ('pass', 'miss') AND prompt_tokens > 0 GROUP BY backend"
          " ORDER BY backend",
          "reading job timings per backend");
  return ReadRows(q, [](const Query& r) {
    BackendTiming t;
    Columns(r).Into(t.backend, t.ms_per_token, t.jobs);
    return t;
  });
}

Result<std::vector<LayerProbeStats>> Store::ProbeStats(int64_t campaign_id) {
  NW_RETURN_IF_ERROR(impl_->CheckCampaign(campaign_id));
  Query q(*impl_->db,
          "SELECT config, layer, answers, passes, in_topk_last, pass_in_topk_last, visible,"
          " median_rank, mean_in_topk_fraction, best_rank"
          " FROM v_probe_summary WHERE campaign_id = ? ORDER BY config, layer",
          "reading view v_probe_summary for campaign " + std::to_string(campaign_id));
  q.Bind(1, campaign_id);
  return ReadRows(q, [](const Query& r) {
    LayerProbeStats s;
    Columns(r).Into(s.config, s.layer, s.answers, s.passes, s.in_topk_last, s.pass_in_topk_last,
                    s.visible, s.median_rank, s.mean_in_topk_fraction, s.best_rank);
    return s;
  });
}

}  // namespace nw
