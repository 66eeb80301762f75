// `nw export`: a campaign's jobs with their latest results, for other tools. One row per job of
// the campaign (jobs without a result yet have empty / null result fields), in insertion order.
//   CSV:         a header row, then one row per job; columns in ExportColumns() order.
//   JSON Lines:  one object per line with the same keys in the same order, numbers as numbers,
//                absent values as null, plus "probes" (the indexer probe summaries per layer).
// Thread-safety: the loader uses the caller's Store; the writers are pure.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "db/store.h"

namespace nw::report {

enum class ExportFormat { kCsv, kJsonl };
/// "csv" or "jsonl" (also "jsonlines", "ndjson").
Result<ExportFormat> ParseExportFormat(const std::string& name);

/// The columns, in order.
const std::vector<std::string>& ExportColumns();

/// One job as an ordered object keyed by ExportColumns() (+ "probes" when with_probes).
nlohmann::ordered_json ExportRow(const std::string& campaign, const CampaignSample& s,
                                 bool with_probes);

/// Reads the named campaign (one snapshot) and writes it to `out`. NotFound names the campaign
/// and the database file. Returns the number of rows written.
Result<int64_t> ExportCampaign(Store& store, const std::string& campaign_name, ExportFormat format,
                               std::ostream& out);

}  // namespace nw::report
