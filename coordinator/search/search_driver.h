// SearchDriver: the boundary searches of one campaign (`search: {boundary: ...}`), one LineSearch
// per line (the grid's jobs that differ only in context length and trial: one configuration and
// needle position), connected to the Store. The coordinator calls it after each batch of results
// is committed (`nw run`: ServerOptions::on_committed; the daemon: Server::Serve for every
// campaign submitted with a search); it answers with the jobs to add.
//
// Jobs are the grid's own JobSpecs (ExpandCampaign), so a search job has the key the grid job has
// and results are shared both ways with grid campaigns. When a search asks for a job whose result
// is already in the database (of this or any campaign), the driver reads it instead of running it.
//
// Recovery: the state of every search is a function of the committed results. Start() replays
// the searches from the database (ask, read what is stored, ask again, ...) and returns the jobs
// they have asked for so far; after a coordinator restart it reaches the same point the searches
// had reached, and the jobs still to run are the ones without a result.
//
// Thread-safety: owned by the coordinator's thread (the Store's owner).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/campaign/campaign.h"
#include "coordinator/search/boundary_search.h"
#include "db/store.h"
#include "protocol/job.h"

namespace nw::search {

/// The verdict of one line, with lengths instead of grid indexes.
struct LineReport {
  std::string config;  // as v_job_config labels it: "topk=16 precision=fp32 backend=cpu ..."
  double needle_position = 0;
  std::vector<int64_t> lengths;  // the line's grid, shortest first
  LineVerdict verdict;
  std::optional<int64_t> pass_length;  // lengths[verdict.pass_index]
  std::optional<int64_t> fail_length;  // lengths[verdict.fail_index]
  int64_t grid_jobs = 0;               // lengths x trials
};

class SearchDriver {
 public:
  /// `grid`: the campaign's whole expansion; `trials`: the campaign's trials per cell (the pool).
  /// InvalidArgument when a line lacks a (length, trial) job or the settings are out of range.
  static Result<SearchDriver> Create(const BoundarySearchSettings& settings, int trials,
                                     const std::vector<JobSpec>& grid);

  /// Replays the searches from the outcomes stored in `store` and returns every job they asked
  /// for so far (finished or not), for the caller to link to the campaign (SetCampaignJobs).
  Result<std::vector<JobSpec>> Start(Store& store);

  /// Records the outcomes of committed results and of jobs given up (no answer), advances the
  /// searches, links the jobs they ask for to `campaign_id` (Store::AddJobs) and returns the ones
  /// that still have to run. Keys the searches did not ask for are ignored.
  Result<std::vector<JobRecord>> OnFinished(Store& store, int64_t campaign_id,
                                            const std::vector<JobResult>& committed,
                                            const std::vector<std::string>& given_up,
                                            int64_t now_ms);

  std::vector<LineReport> Lines() const;
  int64_t grid_jobs() const { return grid_jobs_; }
  /// Jobs the searches asked for (each counted once, run or read from the database).
  int64_t asked_jobs() const;
  bool finished() const;

 private:
  struct Line {
    std::string config;
    double position = 0;
    std::vector<int64_t> lengths;
    std::vector<std::vector<JobSpec>> jobs;  // [length index][trial]
    LineSearch search;
  };
  struct Slot {
    size_t line = 0, length = 0;
    int trial = 0;
  };

  SearchDriver() = default;
  Status Record(const std::string& key, TrialOutcome outcome);
  // Advances the given lines until each waits for a job without a stored result. Appends every
  // job asked for to `asked` and those without a result to `to_run` (with their attempts so far).
  Status Advance(Store& store, std::vector<size_t> lines, std::vector<JobSpec>* asked,
                 std::vector<JobRecord>* to_run);

  std::vector<Line> lines_;
  std::map<std::string, Slot> slot_of_;  // key -> where it sits, for the jobs asked for
  std::set<std::string> waiting_;        // keys asked for whose outcome is not recorded yet
  int64_t grid_jobs_ = 0;
};

}  // namespace nw::search
