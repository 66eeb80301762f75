-- 0001_initial: the tables of needlework. The coordinator is the only writer.
-- Times are milliseconds since the Unix epoch (wall clock). Applied by Store::Open inside one
-- transaction together with its schema_version row; a migration must not BEGIN or COMMIT itself.
-- Applied migrations are immutable: change the schema by adding 0003_..., never by editing this.

-- A campaign is a named YAML file expanded into jobs. Re-submitting a campaign by name updates
-- its source and links the (new) jobs; jobs are shared between campaigns by key.
CREATE TABLE campaigns (
  id          INTEGER PRIMARY KEY,
  name        TEXT    NOT NULL UNIQUE CHECK (name <> ''),
  source_path TEXT    NOT NULL DEFAULT '',
  source_text TEXT    NOT NULL DEFAULT '',
  created_ms  INTEGER NOT NULL,
  updated_ms  INTEGER NOT NULL
);

-- One content-addressed evaluation (protocol/job.h JobSpec). key = JobSpec::Key(). spec_json is
-- the canonical spec; the columns after it are the spec broken out for SQL.
CREATE TABLE jobs (
  key             TEXT    PRIMARY KEY NOT NULL CHECK (key <> ''),
  spec_json       TEXT    NOT NULL,
  model_digest    TEXT    NOT NULL,
  engine_version  TEXT    NOT NULL,
  task            TEXT    NOT NULL,
  haystack        TEXT    NOT NULL,
  context_length  INTEGER NOT NULL,
  needle_position REAL    NOT NULL,
  topk            INTEGER NOT NULL,
  precision       TEXT    NOT NULL,             -- the profile's name (fp32, fp8-index, ...)
  precision_json  TEXT    NOT NULL,             -- the full profile
  backend         TEXT    NOT NULL,
  seed            INTEGER NOT NULL,
  trial           INTEGER NOT NULL,
  max_new_tokens  INTEGER NOT NULL,
  probe           INTEGER NOT NULL CHECK (probe IN (0, 1)),
  state           TEXT    NOT NULL DEFAULT 'queued'
                  CHECK (state IN ('queued', 'leased', 'done', 'failed')),
  attempts        INTEGER NOT NULL DEFAULT 0,   -- highest attempt number leased so far
  last_error      TEXT    NOT NULL DEFAULT '',  -- "code: message" of the last failure
  created_ms      INTEGER NOT NULL,
  updated_ms      INTEGER NOT NULL
);
-- The coordinator's queue scan and Progress() count by state.
CREATE INDEX jobs_by_state ON jobs (state);

-- Which jobs a campaign consists of (many-to-many: identical jobs are shared).
CREATE TABLE campaign_jobs (
  campaign_id INTEGER NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
  job_key     TEXT    NOT NULL REFERENCES jobs (key) ON DELETE CASCADE,
  PRIMARY KEY (campaign_id, job_key)
) WITHOUT ROWID;
CREATE INDEX campaign_jobs_by_job ON campaign_jobs (job_key);

-- One lease of a job to a worker. attempt numbers grow per job and are never reused.
-- status: running (leased, no answer yet) | ok (its result was stored) | failed (RecordFailure)
--       | stale (another attempt's result won first) | lost (the coordinator restarted).
CREATE TABLE attempts (
  job_key          TEXT    NOT NULL REFERENCES jobs (key) ON DELETE CASCADE,
  attempt          INTEGER NOT NULL CHECK (attempt >= 1),
  worker_id        TEXT    NOT NULL,
  started_ms       INTEGER NOT NULL,
  lease_expires_ms INTEGER NOT NULL,
  ended_ms         INTEGER,
  status           TEXT    NOT NULL DEFAULT 'running'
                   CHECK (status IN ('running', 'ok', 'failed', 'stale', 'lost')),
  error_code       TEXT    NOT NULL DEFAULT '',   -- StatusCodeName
  error_message    TEXT    NOT NULL DEFAULT '',
  PRIMARY KEY (job_key, attempt)
) WITHOUT ROWID;
CREATE INDEX attempts_running ON attempts (job_key) WHERE status = 'running';
CREATE INDEX attempts_by_worker ON attempts (worker_id, started_ms);

-- What a worker sent back for one attempt (protocol/job.h JobResult). At most one row per
-- (job, attempt); the first result of a job wins (later ones for a done job are not stored).
-- After --rerun a job can hold several results; the latest (highest id) is the one reported.
CREATE TABLE results (
  id                  INTEGER PRIMARY KEY,
  job_key             TEXT    NOT NULL REFERENCES jobs (key) ON DELETE CASCADE,
  attempt             INTEGER NOT NULL,
  outcome             TEXT    NOT NULL CHECK (outcome IN ('pass', 'miss', 'truncated', 'empty',
                                                          'engine_error', 'timeout')),
  generated_text      TEXT    NOT NULL DEFAULT '',
  expected            TEXT    NOT NULL DEFAULT '',
  needle_token_offset INTEGER NOT NULL DEFAULT -1,
  prompt_hash         TEXT    NOT NULL DEFAULT '',
  prompt_tokens       INTEGER NOT NULL DEFAULT 0,
  generated_tokens    INTEGER NOT NULL DEFAULT 0,
  prefill_ms          REAL    NOT NULL DEFAULT 0,
  decode_ms           REAL    NOT NULL DEFAULT 0,
  total_ms            REAL    NOT NULL DEFAULT 0,
  worker_id           TEXT    NOT NULL DEFAULT '',
  device              TEXT    NOT NULL DEFAULT '',
  engine_version      TEXT    NOT NULL DEFAULT '',
  error_code          TEXT    NOT NULL DEFAULT '',
  error_message       TEXT    NOT NULL DEFAULT '',
  retryable           INTEGER NOT NULL DEFAULT 0 CHECK (retryable IN (0, 1)),
  created_ms          INTEGER NOT NULL,
  UNIQUE (job_key, attempt)
);
-- "Latest result per job" = MAX(id) per job_key.
CREATE INDEX results_latest ON results (job_key, id);
CREATE INDEX results_by_outcome ON results (outcome);

-- Indexer probes of one result, one row per indexer layer (protocol/job.h ProbeSummary): over the
-- probed query positions (question tokens and decode steps), the needle's best (0-based) rank
-- among the visible compressed entries (-1: never visible), whether it was selected, and at the
-- last prompt position (the one that produces the answer) whether it was selected.
CREATE TABLE probes (
  result_id          INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
  job_key            TEXT    NOT NULL,
  layer              INTEGER NOT NULL,
  positions          INTEGER NOT NULL,
  needle_rank_min    INTEGER NOT NULL,
  needle_rank_median REAL    NOT NULL,
  in_topk_fraction   REAL    NOT NULL,
  in_topk_last       INTEGER NOT NULL CHECK (in_topk_last IN (0, 1)),
  topk               INTEGER NOT NULL,
  ranks_json         TEXT    NOT NULL DEFAULT '[]',
  topk_last_json     TEXT    NOT NULL DEFAULT '[]',
  PRIMARY KEY (result_id, layer)
) WITHOUT ROWID;
CREATE INDEX probes_by_job ON probes (job_key);
CREATE INDEX probes_by_layer ON probes (layer);

-- Workers the coordinator has seen.
CREATE TABLE workers (
  id                TEXT    PRIMARY KEY NOT NULL CHECK (id <> ''),
  host              TEXT    NOT NULL DEFAULT '',
  device            TEXT    NOT NULL DEFAULT '',
  capabilities_json TEXT    NOT NULL DEFAULT '{}',
  first_seen_ms     INTEGER NOT NULL,
  last_seen_ms      INTEGER NOT NULL,
  state             TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'lost', 'gone'))
);
