-- 0011_gpu_busy: the GPU's busy fraction as GPU workers measure it with NVML (issue 13,
-- worker/gpu_busy_sampler.h): the mean of the driver's utilization samples, each the share of a
-- sample period in which a kernel ran (nvidia-smi's utilization.gpu), as a fraction 0..1.
--
-- results.gpu_busy: over the job's run on its worker (the GPU's, so other slots on the same GPU
-- count too). NULL where not measured: CPU and http workers, GPU workers without NVML, jobs
-- shorter than the driver's sample period, and every result before this migration.
ALTER TABLE results ADD COLUMN gpu_busy REAL
  CHECK (gpu_busy IS NULL OR (gpu_busy >= 0 AND gpu_busy <= 1));

-- workers.gpu_busy: over the last interval the worker reported (HEARTBEAT, every 10 s by
-- default), gpu_busy_ms long, received at gpu_busy_at_ms (wall clock). NULL for workers that
-- never reported one.
ALTER TABLE workers ADD COLUMN gpu_busy REAL
  CHECK (gpu_busy IS NULL OR (gpu_busy >= 0 AND gpu_busy <= 1));
ALTER TABLE workers ADD COLUMN gpu_busy_ms INTEGER CHECK (gpu_busy_ms IS NULL OR gpu_busy_ms >= 0);
ALTER TABLE workers ADD COLUMN gpu_busy_at_ms INTEGER;

-- v_results as in 0009, plus gpu_busy.
DROP VIEW v_results;
CREATE VIEW v_results AS
SELECT r.id AS result_id, r.job_key, r.attempt, r.outcome, r.generated_text, r.expected,
       r.needle_token_offset, r.prompt_hash, r.prompt_tokens, r.generated_tokens, r.prefill_ms,
       r.decode_ms, r.total_ms, r.worker_id, r.device, r.engine_version, r.error_code,
       r.error_message, r.retryable, r.created_ms,
       j.config, j.model_digest, j.task, j.haystack, j.context_length, j.needle_position,
       j.topk, j.precision, j.backend, j.seed, j.trial, j.state AS job_state,
       r.ttft_ms, r.tpot_ms, r.itl_p50_ms, r.itl_p95_ms, r.stream_events, r.gpu_busy
FROM results r
JOIN v_job_config j ON j.key = r.job_key
WHERE r.id = (SELECT MAX(r2.id) FROM results r2 WHERE r2.job_key = r.job_key);

-- GPU busy per campaign, over the latest results that carry one: how many, and the busy
-- fraction weighted by each job's run time (total_ms), so a long job counts for its length.
-- No row for a campaign without a measured result.
CREATE VIEW v_gpu_busy AS
SELECT c.campaign_id,
       COUNT(*) AS results,
       SUM(r.total_ms) AS total_ms,
       CASE WHEN SUM(r.total_ms) > 0 THEN SUM(r.gpu_busy * r.total_ms) / SUM(r.total_ms)
            ELSE AVG(r.gpu_busy) END AS gpu_busy
FROM v_campaign_jobs c
JOIN results r ON r.id = c.result_id
WHERE r.gpu_busy IS NOT NULL
GROUP BY c.campaign_id;
