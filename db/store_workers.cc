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
            " last_seen_ms, state) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET host = excluded.host, device = excluded.device,"
            " capabilities_json = excluded.capabilities_json,"
            " last_seen_ms = excluded.last_seen_ms, state = excluded.state",
            "upserting into table workers");
    q.Bind(1, w.id)
        .Bind(2, w.host)
        .Bind(3, w.device)
        .Bind(4, w.capabilities.is_null() ? std::string("{}") : w.capabilities.dump())
        .Bind(5, w.first_seen_ms)
        .Bind(6, w.last_seen_ms)
        .Bind(7, state);
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
          "SELECT id, host, device, capabilities_json, first_seen_ms, last_seen_ms, state"
          " FROM workers ORDER BY id",
          "listing table workers");
  return ReadRows(q, [&](const Query& r) -> Result<WorkerRecord> {
    WorkerRecord w;
    Columns(r).Into(w.id, w.host, w.device).Skip(1).Into(w.first_seen_ms, w.last_seen_ms, w.state);
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
