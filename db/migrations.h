// The schema migrations compiled into this build (db/migrations/NNNN_name.sql, generated into
// migrations_embedded.cc by db/embed_migrations.cmake). Internal to nw_db: other code uses
// Store::EmbeddedMigrations(). Thread-safety: immutable data.
#pragma once

#include <cstddef>

namespace nw::db_internal {

struct EmbeddedMigration {
  int version;                // NNNN, 1..N in order
  const char* name;           // "0001_initial"
  const char* const* pieces;  // the SQL text, split at line ends; concatenate in order
  size_t piece_count;
};

extern const EmbeddedMigration kEmbeddedMigrations[];
extern const size_t kEmbeddedMigrationCount;

}  // namespace nw::db_internal
