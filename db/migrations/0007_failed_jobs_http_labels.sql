-- 0007_failed_jobs_http_labels: failed jobs are not pending, and http configurations are named
-- by their server and model (issue 14). Views only; no table changes.
--
-- SQLite resolves a view's references when it is queried, so a view can be dropped and created
-- again while other views name it; the views below are replaced in dependency order.

-- The configuration label. For the http backend, `backend=` carries what identifies the
-- server's results (protocol/job.h HttpBackendSpec::KeyJson): the model name and the URL, and
-- the api when it is chat:
--   "topk=16 precision=fp32 backend=http:tiny-v4@http://127.0.0.1:8000 task=niah-single ..."
--   "... backend=http-chat:tiny-v4@http://127.0.0.1:8000 ..."
-- so two servers (or two models on one server) are two configurations. Every other backend is
-- labelled as before. db/store.h ConfigLabel builds the same string from a JobSpec.
DROP VIEW v_job_config;
CREATE VIEW v_job_config AS
SELECT j.key, j.model_digest, j.engine_version, j.task, j.haystack, j.context_length,
       j.needle_position, j.topk, j.precision, j.precision_json, j.backend, j.seed, j.trial,
       j.max_new_tokens, j.probe, j.state, j.attempts, j.last_error, j.created_ms, j.updated_ms,
       'topk=' || j.topk || ' precision=' || j.precision || ' backend=' ||
       CASE WHEN j.backend = 'http' THEN
         'http' ||
         CASE WHEN json_extract(j.spec_json, '$.http.api') = 'chat' THEN '-chat' ELSE '' END ||
         ':' || COALESCE(json_extract(j.spec_json, '$.http.model'), '') ||
         '@' || COALESCE(json_extract(j.spec_json, '$.http.url'), '')
       ELSE j.backend END ||
       ' task=' || j.task || ' haystack=' || j.haystack AS config
FROM jobs j;

-- One cell per (campaign, configuration, context length, needle position), as in 0002, with
--   failed  = jobs that gave up (retries used up, jobs.state = 'failed') without any result:
--             they are no longer counted as pending;
--   pending = jobs without any result that have not failed (queued or leased).
DROP VIEW v_heatmap;
CREATE VIEW v_heatmap AS
SELECT campaign_id, config, topk, precision, backend, task, haystack, context_length,
       needle_position,
       COUNT(*) AS jobs,
       SUM(CASE WHEN outcome IN ('pass', 'miss') THEN 1 ELSE 0 END) AS trials,
       SUM(CASE WHEN outcome = 'pass' THEN 1 ELSE 0 END) AS passes,
       SUM(CASE WHEN outcome IN ('truncated', 'empty', 'engine_error', 'timeout')
                THEN 1 ELSE 0 END) AS errors,
       SUM(CASE WHEN outcome IS NULL AND state <> 'failed' THEN 1 ELSE 0 END) AS pending,
       CAST(SUM(CASE WHEN outcome = 'pass' THEN 1 ELSE 0 END) AS REAL) /
         NULLIF(SUM(CASE WHEN outcome IN ('pass', 'miss') THEN 1 ELSE 0 END), 0) AS pass_rate,
       SUM(CASE WHEN outcome IS NULL AND state = 'failed' THEN 1 ELSE 0 END) AS failed
FROM v_campaign_jobs
GROUP BY campaign_id, config, context_length, needle_position;

-- As in 0002, with failed summed over positions.
DROP VIEW v_length_status;
CREATE VIEW v_length_status AS
SELECT campaign_id, config, context_length,
       COUNT(*) AS cells,
       SUM(CASE WHEN trials > 0 AND passes = trials THEN 1 ELSE 0 END) AS clean_cells,
       SUM(CASE WHEN passes < trials THEN 1 ELSE 0 END) AS failing_cells,
       SUM(trials) AS trials, SUM(passes) AS passes, SUM(errors) AS errors,
       SUM(pending) AS pending, SUM(failed) AS failed
FROM v_heatmap
GROUP BY campaign_id, config, context_length;

-- As in 0002 (the strict facts: one miss makes a length failing), with the failed jobs.
DROP VIEW v_boundary;
CREATE VIEW v_boundary AS
WITH ls AS (
  SELECT * FROM v_length_status
),
agg AS (
  SELECT campaign_id, config,
         COUNT(*) AS lengths,
         MIN(context_length) AS min_length,
         MAX(context_length) AS max_length,
         MIN(CASE WHEN failing_cells > 0 THEN context_length END) AS l_fail,
         MIN(CASE WHEN clean_cells < cells THEN context_length END) AS first_unclean,
         MAX(CASE WHEN clean_cells = cells THEN context_length END) AS max_clean,
         SUM(trials) AS trials, SUM(passes) AS passes, SUM(errors) AS errors,
         SUM(pending) AS pending, SUM(failed) AS failed
  FROM ls
  GROUP BY campaign_id, config
)
SELECT a.campaign_id, a.config, a.lengths, a.min_length, a.max_length,
       (SELECT MAX(s.context_length) FROM ls s
        WHERE s.campaign_id = a.campaign_id AND s.config = a.config
          AND (a.first_unclean IS NULL OR s.context_length < a.first_unclean)) AS l_pass,
       a.l_fail, a.first_unclean, a.max_clean,
       CASE WHEN a.l_fail IS NOT NULL AND a.max_clean > a.l_fail THEN 0 ELSE 1 END AS monotone,
       f.trials AS fail_trials, f.passes AS fail_passes,
       a.trials, a.passes, a.errors, a.pending, a.failed
FROM agg a
LEFT JOIN ls f
  ON f.campaign_id = a.campaign_id AND f.config = a.config AND f.context_length = a.l_fail;

-- Every job of every campaign that ended without an answer, and why:
--   kind = 'failed'        retries used up, no result (reason: jobs.last_error);
--          'engine_error' or 'timeout'  its latest result (reason: the result's error_code and
--                         error_message).
-- truncated and empty are the model's own outputs (it answered badly) and are not listed.
CREATE VIEW v_job_failures AS
SELECT c.campaign_id, c.job_key, c.config, c.context_length, c.needle_position, c.trial,
       c.attempts,
       CASE WHEN c.outcome IS NULL THEN 'failed' ELSE c.outcome END AS kind,
       CASE WHEN c.outcome IS NULL THEN c.last_error
            ELSE TRIM(COALESCE(r.error_code, '') ||
                      CASE WHEN COALESCE(r.error_code, '') <> '' AND
                                COALESCE(r.error_message, '') <> '' THEN ': ' ELSE '' END ||
                      COALESCE(r.error_message, '')) END AS reason
FROM v_campaign_jobs c
LEFT JOIN results r ON r.id = c.result_id
WHERE (c.outcome IS NULL AND c.state = 'failed') OR c.outcome IN ('engine_error', 'timeout');
