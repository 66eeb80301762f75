-- 0004_coordinator_campaigns: the coordinator daemon's campaign table (priority and run state of
-- every campaign submitted to `nw coordinator`), so that a restarted daemon recovers it with
-- everything else.
--
-- Before this migration the daemon created the table itself, on its own connection, with exactly
-- this definition and CREATE TABLE IF NOT EXISTS. A database it served already has the table and
-- its rows: IF NOT EXISTS keeps them, so such a file migrates without change to its data
-- (tests/db/migrations_test.cc, Migrations.CoordinatorCampaignsFromTheOldDaemonAreKept).
--
-- campaign_id is campaigns.id. No foreign key: the daemon writes the table on a connection of its
-- own (coordinator/campaign_table.h), and rows written before this migration are kept as they are.
-- `nw run` never reads or writes it.
CREATE TABLE IF NOT EXISTS coordinator_campaigns (
  campaign_id  INTEGER PRIMARY KEY,
  name         TEXT    NOT NULL,
  priority     INTEGER NOT NULL DEFAULT 0,
  state        TEXT    NOT NULL CHECK (state IN ('active', 'paused', 'cancelled')),
  submitted_ms INTEGER NOT NULL,
  updated_ms   INTEGER NOT NULL
);
