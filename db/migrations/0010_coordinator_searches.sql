-- 0010_coordinator_searches: the boundary searches of campaigns submitted to the coordinator
-- daemon (`nw submit` of a campaign with `search:`). A row holds what the daemon cannot rebuild
-- on its own after a restart: the search's settings and the campaign's whole grid (the JobSpecs
-- the search may ask for, as the submitter expanded them). What the search has decided so far is
-- not stored: it is a function of the stored results, replayed at start
-- (coordinator/search/search_driver.h).
--
-- campaign_id is campaigns.id (as in coordinator_campaigns, written on the daemon's own
-- connection: no foreign key). grid_json: a JSON array of canonical JobSpecs
-- (protocol/job.h). `nw run` never reads or writes it.
CREATE TABLE coordinator_searches (
  campaign_id  INTEGER PRIMARY KEY,
  trials       INTEGER NOT NULL CHECK (trials >= 1),
  first_trials INTEGER NOT NULL CHECK (first_trials >= 1 AND first_trials <= trials),
  confidence   REAL    NOT NULL CHECK (confidence > 0 AND confidence < 1),
  pass_rate    REAL    NOT NULL CHECK (pass_rate > 0 AND pass_rate < 1),
  budget       INTEGER CHECK (budget IS NULL OR budget >= 1),
  grid_json    TEXT    NOT NULL,
  updated_ms   INTEGER NOT NULL
);
