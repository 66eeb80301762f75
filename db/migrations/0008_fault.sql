-- 0008_fault: the known-bug replay axis (engine/fault.h, docs/faults.md). Every job gets a fault
-- column ('none' for every job before this migration and every job without a fault), and the
-- configuration label gains " fault=NAME" only when the fault is not none, so existing labels
-- (and every view, report and gate built on them) are unchanged.
ALTER TABLE jobs ADD COLUMN fault TEXT NOT NULL DEFAULT 'none' CHECK (fault <> '');

-- v_job_config as in 0007 (http labels), plus the fault column and label suffix. The views built on it
-- (v_results, v_campaign_jobs and those after them) read it by name and need no change.
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
       ' task=' || j.task || ' haystack=' || j.haystack ||
       CASE WHEN j.fault = 'none' THEN '' ELSE ' fault=' || j.fault END AS config,
       j.fault
FROM jobs j;
