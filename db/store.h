// Store: the SQLite database of needlework. The coordinator is its only writer.
//
// Opening applies the numbered migrations in db/migrations/ (embedded in the binary) inside a
// transaction, so a database is either at the new version or untouched. WAL mode, a busy timeout,
// synchronous=NORMAL, foreign keys on. Writes are batched in transactions; a result is committed
// before the coordinator acknowledges it. Read-only opens (reports, `nw status`) never write.
// Thread-safety: a Store is owned by one thread; open a second read-only Store for readers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/job.h"

namespace nw {

enum class JobState { kQueued, kLeased, kDone, kFailed };
std::string_view JobStateName(JobState s);  // queued, leased, done, failed

struct CampaignRecord {
  int64_t id = 0;
  std::string name;
  std::string source_path;   // the YAML file it came from
  std::string source_text;   // the YAML text as submitted
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

struct JobRecord {
  std::string key;
  JobSpec spec;
  JobState state = JobState::kQueued;
  int attempts = 0;            // attempts started so far
  std::string last_error;      // last failure reason, if any
};

struct CampaignProgress {
  int64_t total = 0, queued = 0, leased = 0, done = 0, failed = 0;
  int64_t pass = 0, miss = 0, other = 0;  // outcomes of done jobs (other: truncated, empty, ...)
};

/// One cell of the length x position heatmap for one configuration.
struct HeatmapCell {
  std::string config;          // "topk=16 precision=fp32 backend=cpu task=niah-single/noise"
  int64_t context_length = 0;
  double needle_position = 0;
  int64_t trials = 0;          // pass + miss (answers only; infrastructure failures excluded)
  int64_t passes = 0;
  int64_t errors = 0;          // engine_error + timeout + truncated + empty
};

struct WorkerRecord {
  std::string id;
  std::string host;
  std::string device;
  nlohmann::json capabilities;
  int64_t first_seen_ms = 0;
  int64_t last_seen_ms = 0;
  std::string state;           // active | lost | gone
};

class Store {
 public:
  enum class Mode { kReadWrite, kReadOnly };

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Opens (creating if kReadWrite) and migrates. Errors name the file.
  static Result<std::unique_ptr<Store>> Open(const std::filesystem::path& path,
                                             Mode mode = Mode::kReadWrite);
  /// Latest migration number this build knows, and the one the file is at.
  static int LatestSchemaVersion();
  Result<int> SchemaVersion();

  // ---- Campaigns ----
  /// Creates or updates the campaign by name; returns its id.
  Result<int64_t> UpsertCampaign(const std::string& name, const std::string& source_path,
                                 const std::string& source_text, int64_t now_ms);
  Result<std::optional<CampaignRecord>> FindCampaign(const std::string& name);
  Result<std::vector<CampaignRecord>> ListCampaigns();

  // ---- Jobs ----
  /// Inserts jobs that are new (by key) and links all of them to the campaign, in one
  /// transaction. Existing jobs keep their state and results.
  Status AddJobs(int64_t campaign_id, const std::vector<JobSpec>& jobs, int64_t now_ms);
  /// Jobs of the campaign with their state.
  Result<std::vector<JobRecord>> CampaignJobs(int64_t campaign_id);
  /// Of the given keys, the ones already done.
  Result<std::vector<std::string>> DoneKeys(const std::vector<std::string>& keys);
  /// --rerun: puts the jobs back to queued (their old results stay in the results table).
  Status RequeueJobs(const std::vector<std::string>& keys, int64_t now_ms);
  /// After a coordinator restart: every leased job goes back to queued; returns how many.
  Result<int64_t> RequeueLeased(int64_t now_ms);

  /// Records a new attempt: job -> leased, an attempts row (key, attempt, worker, times).
  Status RecordLease(const std::string& key, int attempt, const std::string& worker_id,
                     int64_t lease_expires_ms, int64_t now_ms);
  /// Commits results in one transaction: results rows, jobs -> done, attempts closed. A result
  /// for a job already done is ignored (first result wins by key).
  Status CommitResults(const std::vector<JobResult>& results, int64_t now_ms);
  /// Closes an attempt as failed with its reason; the job goes back to queued (will_retry) or to
  /// failed.
  Status RecordFailure(const std::string& key, int attempt, const Status& reason, bool will_retry,
                       int64_t now_ms);

  // ---- Workers ----
  Status UpsertWorker(const WorkerRecord& w);

  // ---- Reading ----
  Result<CampaignProgress> Progress(int64_t campaign_id);
  Result<std::vector<HeatmapCell>> Heatmap(int64_t campaign_id);
  /// Results of a campaign's jobs (latest per job).
  Result<std::vector<JobResult>> Results(int64_t campaign_id);

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nw
