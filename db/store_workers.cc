// Store: the workers table (registrations, departures, and the bound on its size).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "db/rows.h"
#include "db/sqlite.h"
#include "db/store.h"
#include "db/store_impl.h"

namespace nw {

using db_internal::Columns;
using db_internal::Query;
using db_internal::ReadRows;
using json = nlohmann::json;

namespace {

// Rows of workers that are lost or gone kept in table workers (the newest by last_seen_ms).
constexpr int64_t kMaxInactiveWorkerRows = 4096;
constexpr int64_t kWorkerPruneEvery = 64;

}  // namespace

Status Store::UpsertWorker(const WorkerRecord& w) {
  if (w.id.empty()) return Status::InvalidArgument(impl_->file() + ": table workers: empty id");
  const std::string state = w.state.empty() ? "active" : w.state;
  if (state != "active" && state != "lost" && state != "gone") {
    return Status::InvalidArgument(impl_->file() + ": table workers: worker '" + w.id +
                                   "': unknown state '" + state + "'");
  }
  return impl_->Write("upserting worker '" + w.id + "'", [&]() -> Status {
    Query q(*impl_->db,
            "INSERT INTO workers (id, host, device, capabilities_json, first_seen_ms,"
            " last_seen_ms, state, gpu_busy, gpu_busy_ms, gpu_busy_at_ms)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET host = excluded.host, device = excluded.device,"
            " capabilities_json = excluded.capabilities_json,"
            " last_seen_ms = excluded.last_seen_ms, state = excluded.state,"
            " gpu_busy = COALESCE(excluded.gpu_busy, workers.gpu_busy),"
            " gpu_busy_ms = COALESCE(excluded.gpu_busy_ms, workers.gpu_busy_ms),"
            " gpu_busy_at_ms = COALESCE(excluded.gpu_busy_at_ms, workers.gpu_busy_at_ms)",
            "upserting into table workers");
    q.Bind(1, w.id)
        .Bind(2, w.host)
        .Bind(3, w.device)
        .Bind(4, w.capabilities.is_null() ? std::string("{}") : w.capabilities.dump())
        .Bind(5, w.first_seen_ms)
        .Bind(6, w.last_seen_ms)
        .Bind(7, state);
    // A worker's last GPU busy report stays until it sends a newer one (a record without one,
    // e.g. from its registration, keeps the stored one).
    if (w.gpu_busy) {
      q.Bind(8, *w.gpu_busy).Bind(9, w.gpu_busy_ms).Bind(10, w.gpu_busy_at_ms);
    } else {
      q.BindNull(8).BindNull(9).BindNull(10);
    }
    NW_RETURN_IF_ERROR(q.Run());
    // Workers that left are history: only the newest kMaxInactiveWorkerRows are kept (checked
    // every kWorkerPruneEvery departures, so at most that many more), so peers registering ever
    // new ids cannot grow the table without bound (results and attempts keep their worker ids).
    if (state == "active" || ++impl_->departures % kWorkerPruneEvery != 0) return Status::Ok();
    Query prune(*impl_->db,
                "DELETE FROM workers WHERE state <> 'active' AND id NOT IN (SELECT id FROM"
                " workers WHERE state <> 'active' ORDER BY last_seen_ms DESC, id LIMIT ?)",
                "pruning table workers");
    prune.Bind(1, kMaxInactiveWorkerRows);
    return prune.Run();
  });
}

Result<std::vector<WorkerRecord>> Store::ListWorkers() {
  Query q(*impl_->db,
          "SELECT id, host, device, capabilities_json, first_seen_ms, last_seen_ms, state,"
          " gpu_busy, gpu_busy_ms, gpu_busy_at_ms FROM workers ORDER BY id",
          "listing table workers");
  return ReadRows(q, [&](const Query& r) -> Result<WorkerRecord> {
    WorkerRecord w;
    Columns(r).Into(w.id, w.host, w.device).Skip(1).Into(w.first_seen_ms, w.last_seen_ms, w.state);
    w.gpu_busy = r.OptReal(7);
    w.gpu_busy_ms = r.OptInt(8).value_or(0);
    w.gpu_busy_at_ms = r.OptInt(9).value_or(0);
    try {
      w.capabilities = json::parse(r.Text(3));
    } catch (const json::exception& e) {
      return Status::Corruption(impl_->file() + ": table workers, id " + w.id +
                                ": capabilities_json is not JSON (" + e.what() + ")");
    }
    return w;
  });
}

}  // namespace nw
