// Applying the schema migrations to an open connection. Internal to nw_db (Store::Open).
// Thread-safety: operates on one Db, owned by the caller's thread.
#pragma once

#include <vector>

#include "common/status.h"
#include "db/sqlite.h"
#include "db/store.h"

namespace nw::db_internal {

/// The schema version recorded in the file (0 for a fresh database). Errors if the
/// schema_version table is unreadable.
Result<int> ReadSchemaVersion(Db& db);

/// Checks a migration list: versions 1..N in order, names present, SQL not empty.
Status ValidateMigrations(const std::vector<SchemaMigration>& migrations);

/// Brings the database to the last migration of `migrations`, all pending migrations in one
/// transaction (BEGIN IMMEDIATE), each recorded in schema_version (version, name, sha256,
/// applied_ms) and mirrored in PRAGMA user_version. Refuses (FailedPrecondition) a database
/// whose version is newer than the list, and one whose applied migrations differ from the list
/// (same number, other name or SQL). On a read-only connection a pending migration is an error.
/// On any error the transaction is rolled back and the file is left as it was.
Status Migrate(Db& db, const std::vector<SchemaMigration>& migrations);

}  // namespace nw::db_internal
