#include "coordinator/campaign_table.h"

#include <utility>

namespace nw {
namespace {

struct Finalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, Finalizer>;

StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return StatusCode::kUnavailable;
    case SQLITE_READONLY:
      return StatusCode::kFailedPrecondition;
    case SQLITE_CONSTRAINT:
      return StatusCode::kInvalidArgument;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return StatusCode::kCorruption;
    default:
      return StatusCode::kIoError;
  }
}

}  // namespace

std::string_view CampaignRunStateName(CampaignRunState s) {
  switch (s) {
    case CampaignRunState::kActive:
      return "active";
    case CampaignRunState::kPaused:
      return "paused";
    case CampaignRunState::kCancelled:
      return "cancelled";
  }
  return "active";
}

Result<CampaignRunState> ParseCampaignRunState(std::string_view name) {
  for (auto s :
       {CampaignRunState::kActive, CampaignRunState::kPaused, CampaignRunState::kCancelled}) {
    if (CampaignRunStateName(s) == name) return s;
  }
  return Status::Corruption("unknown campaign state '" + std::string(name) + "'");
}

CampaignTable::CampaignTable(PassKey, std::unique_ptr<sqlite3, Closer> db, std::string file)
    : db_(std::move(db)), file_(std::move(file)) {}

CampaignTable::~CampaignTable() = default;

Status CampaignTable::Error(int rc, std::string_view what) const {
  return Status(CodeFor(rc), file_ + ": " + std::string(what) + ": " + sqlite3_errmsg(db_.get()));
}

Result<std::unique_ptr<CampaignTable>> CampaignTable::Open(const std::filesystem::path& db_file) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(db_file.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  std::unique_ptr<sqlite3, Closer> db(raw);
  if (rc != SQLITE_OK) {
    return Status::IoError(db_file.string() + ": opening for the campaign table: " +
                           (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  auto t = std::make_unique<CampaignTable>(PassKey(), std::move(db), db_file.string());
  sqlite3_busy_timeout(t->db_.get(), 5000);
  // The table comes from the Store's migration 0004_coordinator_campaigns: open the file with
  // Store::Open first (it migrates), then this.
  sqlite3_stmt* raw_stmt = nullptr;
  int prc = sqlite3_prepare_v2(t->db_.get(),
                               "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                               "'coordinator_campaigns'",
                               -1, &raw_stmt, nullptr);
  Stmt stmt(raw_stmt);
  if (prc != SQLITE_OK) return t->Error(prc, "looking for table coordinator_campaigns");
  prc = sqlite3_step(stmt.get());
  if (prc == SQLITE_DONE) {
    return Status::FailedPrecondition(
        t->file_ +
        ": no table coordinator_campaigns: the database is older than migration "
        "0004_coordinator_campaigns (open it with Store::Open, which migrates it, first)");
  }
  if (prc != SQLITE_ROW) return t->Error(prc, "looking for table coordinator_campaigns");
  return t;
}

Result<std::vector<CampaignControl>> CampaignTable::List() {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_.get(),
                              "SELECT campaign_id, name, priority, state, submitted_ms, "
                              "updated_ms FROM coordinator_campaigns ORDER BY campaign_id",
                              -1, &raw, nullptr);
  Stmt stmt(raw);
  if (rc != SQLITE_OK) return Error(rc, "listing coordinator_campaigns");
  std::vector<CampaignControl> out;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    CampaignControl c;
    c.campaign_id = sqlite3_column_int64(stmt.get(), 0);
    const auto* name = sqlite3_column_text(stmt.get(), 1);
    c.name = name != nullptr ? reinterpret_cast<const char*>(name) : "";
    c.priority = sqlite3_column_int(stmt.get(), 2);
    const auto* state = sqlite3_column_text(stmt.get(), 3);
    NW_ASSIGN_OR_RETURN(c.state, ParseCampaignRunState(
                                     state != nullptr ? reinterpret_cast<const char*>(state) : ""));
    c.submitted_ms = sqlite3_column_int64(stmt.get(), 4);
    c.updated_ms = sqlite3_column_int64(stmt.get(), 5);
    out.push_back(std::move(c));
  }
  if (rc != SQLITE_DONE) return Error(rc, "listing coordinator_campaigns");
  return out;
}

Result<std::optional<CampaignControl>> CampaignTable::Find(int64_t campaign_id) {
  NW_ASSIGN_OR_RETURN(auto all, List());
  for (auto& c : all) {
    if (c.campaign_id == campaign_id) return std::optional<CampaignControl>(std::move(c));
  }
  return std::optional<CampaignControl>();
}

Status CampaignTable::Put(const CampaignControl& c) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(
      db_.get(),
      "INSERT INTO coordinator_campaigns (campaign_id, name, priority, state, submitted_ms, "
      "updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (campaign_id) DO UPDATE SET "
      "name = excluded.name, priority = excluded.priority, state = excluded.state, "
      "updated_ms = excluded.updated_ms",
      -1, &raw, nullptr);
  Stmt stmt(raw);
  if (rc != SQLITE_OK) return Error(rc, "writing coordinator_campaigns");
  const std::string state(CampaignRunStateName(c.state));
  sqlite3_bind_int64(stmt.get(), 1, c.campaign_id);
  sqlite3_bind_text(stmt.get(), 2, c.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(stmt.get(), 3, c.priority);
  sqlite3_bind_text(stmt.get(), 4, state.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(stmt.get(), 5, c.submitted_ms);
  sqlite3_bind_int64(stmt.get(), 6, c.updated_ms);
  rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_DONE) return Error(rc, "writing coordinator_campaigns");
  return Status::Ok();
}

}  // namespace nw
