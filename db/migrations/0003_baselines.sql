-- 0003_baselines: named baselines for `nw gate`, and the verdicts of the gate's flaky reruns.

-- A named baseline: a campaign's results frozen at `nw baseline set` time, so that later reruns
-- or edits of the campaign do not move the baseline a release is gated against. Setting the
-- same name again replaces it (created_ms is kept).
CREATE TABLE baselines (
  name        TEXT    PRIMARY KEY NOT NULL CHECK (name <> ''),
  campaign_id INTEGER NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
  note        TEXT    NOT NULL DEFAULT '',
  created_ms  INTEGER NOT NULL,
  updated_ms  INTEGER NOT NULL
);

-- The jobs of a baseline and the result each one had when it was frozen (result_id NULL: the
-- job had no result yet; it stays pending in the baseline even if a result arrives later).
CREATE TABLE baseline_results (
  baseline  TEXT    NOT NULL REFERENCES baselines (name) ON DELETE CASCADE ON UPDATE CASCADE,
  job_key   TEXT    NOT NULL REFERENCES jobs (key) ON DELETE CASCADE,
  result_id INTEGER REFERENCES results (id) ON DELETE SET NULL,
  PRIMARY KEY (baseline, job_key)
) WITHOUT ROWID;
CREATE INDEX baseline_results_by_job ON baseline_results (job_key);

-- One verdict of `nw gate --rerun K` on one job: the job's outcomes over its original result
-- and K reruns (result_ids, a JSON array of results.id). flaky = both passes and misses among
-- them; stable_pass / stable_miss = answers that all agree; no_answer = no pass or miss at all.
-- `gate` names the comparison that asked ("BASELINE -> CANDIDATE").
CREATE TABLE flaky_verdicts (
  id         INTEGER PRIMARY KEY,
  job_key    TEXT    NOT NULL REFERENCES jobs (key) ON DELETE CASCADE,
  gate       TEXT    NOT NULL,
  runs       INTEGER NOT NULL CHECK (runs >= 0),
  passes     INTEGER NOT NULL CHECK (passes >= 0),
  misses     INTEGER NOT NULL CHECK (misses >= 0),
  errors     INTEGER NOT NULL CHECK (errors >= 0),
  verdict    TEXT    NOT NULL
             CHECK (verdict IN ('flaky', 'stable_pass', 'stable_miss', 'no_answer')),
  result_ids TEXT    NOT NULL DEFAULT '[]',
  decided_ms INTEGER NOT NULL
);
CREATE INDEX flaky_verdicts_by_job ON flaky_verdicts (job_key, id);

-- The latest verdict per job, with its configuration and cell.
CREATE VIEW v_flaky_jobs AS
SELECT f.job_key, f.gate, f.runs, f.passes, f.misses, f.errors, f.verdict, f.result_ids,
       f.decided_ms, j.config, j.context_length, j.needle_position, j.trial
FROM flaky_verdicts f
JOIN v_job_config j ON j.key = f.job_key
WHERE f.id = (SELECT MAX(f2.id) FROM flaky_verdicts f2 WHERE f2.job_key = f.job_key);
