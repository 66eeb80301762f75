-- 0009_http_stream_sampling: the http backend's streaming latency and sampling parameters
-- (issue 20, docs/http.md).
--
-- A result of a streamed http job (http: {stream: true}) carries its latency, measured by the
-- worker from the moment the request was sent (protocol/job.h StreamTiming):
--   ttft_ms        time to the first event with text (time to first token);
--   tpot_ms        mean time per output token after the first;
--   itl_p50_ms,    median and 95th percentile of the gaps between consecutive events
--   itl_p95_ms     (inter-token latency; an event may carry more than one token);
--   stream_events  the events with text or the finish reason.
-- All NULL for results that did not stream (every result before this migration).
ALTER TABLE results ADD COLUMN ttft_ms REAL CHECK (ttft_ms IS NULL OR ttft_ms >= 0);
ALTER TABLE results ADD COLUMN tpot_ms REAL CHECK (tpot_ms IS NULL OR tpot_ms >= 0);
ALTER TABLE results ADD COLUMN itl_p50_ms REAL CHECK (itl_p50_ms IS NULL OR itl_p50_ms >= 0);
ALTER TABLE results ADD COLUMN itl_p95_ms REAL CHECK (itl_p95_ms IS NULL OR itl_p95_ms >= 0);
ALTER TABLE results ADD COLUMN stream_events INTEGER
  CHECK (stream_events IS NULL OR stream_events >= 0);

-- v_job_config as in 0008, with " sampling=<json>" appended to the label of an http job whose
-- campaign sets sampling parameters (http: {sampling: {...}}): they change the answers, so a
-- sampled run and a greedy one are different configurations. The JSON is the job spec's, keys
-- sorted, no spaces: " sampling={"seed":7,"temperature":0.7}". Other labels are unchanged
-- (db/store.h ConfigLabel builds the same string).
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
       CASE WHEN j.fault = 'none' THEN '' ELSE ' fault=' || j.fault END ||
       CASE WHEN j.backend = 'http' AND json_extract(j.spec_json, '$.http.sampling') IS NOT NULL
            THEN ' sampling=' || json(json_extract(j.spec_json, '$.http.sampling'))
            ELSE '' END AS config,
       j.fault
FROM jobs j;

-- v_results as in 0002, plus the streaming latency columns.
DROP VIEW v_results;
CREATE VIEW v_results AS
SELECT r.id AS result_id, r.job_key, r.attempt, r.outcome, r.generated_text, r.expected,
       r.needle_token_offset, r.prompt_hash, r.prompt_tokens, r.generated_tokens, r.prefill_ms,
       r.decode_ms, r.total_ms, r.worker_id, r.device, r.engine_version, r.error_code,
       r.error_message, r.retryable, r.created_ms,
       j.config, j.model_digest, j.task, j.haystack, j.context_length, j.needle_position,
       j.topk, j.precision, j.backend, j.seed, j.trial, j.state AS job_state,
       r.ttft_ms, r.tpot_ms, r.itl_p50_ms, r.itl_p95_ms, r.stream_events
FROM results r
JOIN v_job_config j ON j.key = r.job_key
WHERE r.id = (SELECT MAX(r2.id) FROM results r2 WHERE r2.job_key = r.job_key);

-- Streaming latency per (campaign, configuration, context length), over the latest results
-- that streamed: how many, the mean and the range of the time to first token, the mean time
-- per output token, the mean of the per-job median gaps and the largest per-job p95 gap.
CREATE VIEW v_stream_latency AS
SELECT c.campaign_id, c.config, c.context_length,
       COUNT(*) AS results,
       AVG(r.ttft_ms) AS ttft_ms_mean, MIN(r.ttft_ms) AS ttft_ms_min,
       MAX(r.ttft_ms) AS ttft_ms_max,
       AVG(r.tpot_ms) AS tpot_ms_mean,
       AVG(r.itl_p50_ms) AS itl_p50_ms_mean, MAX(r.itl_p95_ms) AS itl_p95_ms_max
FROM v_campaign_jobs c
JOIN results r ON r.id = c.result_id
WHERE r.ttft_ms IS NOT NULL
GROUP BY c.campaign_id, c.config, c.context_length;
