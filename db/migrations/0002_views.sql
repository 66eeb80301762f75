-- 0002_views: the read side. Views only; the report code and `sqlite3` users query these.

-- Every job with its configuration label. The label is defined here and nowhere else:
--   "topk=16 precision=fp32 backend=cpu task=niah-single haystack=noise"
-- A configuration is everything that is neither the context length, the needle position nor the
-- trial (and not the model: a campaign evaluates one model).
CREATE VIEW v_job_config AS
SELECT j.key, j.model_digest, j.engine_version, j.task, j.haystack, j.context_length,
       j.needle_position, j.topk, j.precision, j.precision_json, j.backend, j.seed, j.trial,
       j.max_new_tokens, j.probe, j.state, j.attempts, j.last_error, j.created_ms, j.updated_ms,
       'topk=' || j.topk || ' precision=' || j.precision || ' backend=' || j.backend ||
       ' task=' || j.task || ' haystack=' || j.haystack AS config
FROM jobs j;

-- The latest result (highest id) of every job that has one, joined to its spec columns.
CREATE VIEW v_results AS
SELECT r.id AS result_id, r.job_key, r.attempt, r.outcome, r.generated_text, r.expected,
       r.needle_token_offset, r.prompt_hash, r.prompt_tokens, r.generated_tokens, r.prefill_ms,
       r.decode_ms, r.total_ms, r.worker_id, r.device, r.engine_version, r.error_code,
       r.error_message, r.retryable, r.created_ms,
       j.config, j.model_digest, j.task, j.haystack, j.context_length, j.needle_position,
       j.topk, j.precision, j.backend, j.seed, j.trial, j.state AS job_state
FROM results r
JOIN v_job_config j ON j.key = r.job_key
WHERE r.id = (SELECT MAX(r2.id) FROM results r2 WHERE r2.job_key = r.job_key);

-- Every job of every campaign with its latest result, if any (outcome NULL = no result yet).
CREATE VIEW v_campaign_jobs AS
SELECT cj.campaign_id, j.key AS job_key, j.config, j.topk, j.precision, j.backend, j.task,
       j.haystack, j.context_length, j.needle_position, j.trial, j.state, j.attempts,
       j.last_error, r.id AS result_id, r.attempt AS result_attempt, r.outcome,
       r.prefill_ms, r.decode_ms, r.total_ms, r.worker_id, r.device
FROM campaign_jobs cj
JOIN v_job_config j ON j.key = cj.job_key
LEFT JOIN results r ON r.id = (SELECT MAX(r2.id) FROM results r2 WHERE r2.job_key = j.key);

-- One cell per (campaign, configuration, context length, needle position).
--   trials  = pass + miss: answers from the model. engine_error, timeout, truncated and empty are
--             infrastructure or budget failures and never count as misses;
--   errors  = those non-answers;  pending = jobs without any result yet;
--   pass_rate = passes / trials (NULL without answers).
CREATE VIEW v_heatmap AS
SELECT campaign_id, config, topk, precision, backend, task, haystack, context_length,
       needle_position,
       COUNT(*) AS jobs,
       SUM(CASE WHEN outcome IN ('pass', 'miss') THEN 1 ELSE 0 END) AS trials,
       SUM(CASE WHEN outcome = 'pass' THEN 1 ELSE 0 END) AS passes,
       SUM(CASE WHEN outcome IN ('truncated', 'empty', 'engine_error', 'timeout')
                THEN 1 ELSE 0 END) AS errors,
       SUM(CASE WHEN outcome IS NULL THEN 1 ELSE 0 END) AS pending,
       CAST(SUM(CASE WHEN outcome = 'pass' THEN 1 ELSE 0 END) AS REAL) /
         NULLIF(SUM(CASE WHEN outcome IN ('pass', 'miss') THEN 1 ELSE 0 END), 0) AS pass_rate
FROM v_campaign_jobs
GROUP BY campaign_id, config, context_length, needle_position;

-- One row per (campaign, configuration, context length).
--   clean:   every position at this length has answers and all of them passed
--            (clean_cells = cells);
--   failing: some position at this length has a miss (failing_cells > 0).
-- A length can be neither: no miss, but some position has no answers yet (errors or pending).
CREATE VIEW v_length_status AS
SELECT campaign_id, config, context_length,
       COUNT(*) AS cells,
       SUM(CASE WHEN trials > 0 AND passes = trials THEN 1 ELSE 0 END) AS clean_cells,
       SUM(CASE WHEN passes < trials THEN 1 ELSE 0 END) AS failing_cells,
       SUM(trials) AS trials, SUM(passes) AS passes, SUM(errors) AS errors,
       SUM(pending) AS pending
FROM v_heatmap
GROUP BY campaign_id, config, context_length;

-- The retrieval boundary per (campaign, configuration):
--   l_pass        the largest tested length L such that every tested length <= L is clean, i.e.
--                 the needle was found at every position with all trials passing at L and at
--                 every shorter length (NULL when the shortest length is not clean);
--   l_fail        the smallest length at which some position has a miss (NULL: no miss);
--   first_unclean the smallest length that is not clean (l_pass is the length just below it);
--   max_clean     the largest clean length anywhere; monotone = 0 when max_clean > l_fail, i.e.
--                 retrieval fails at l_fail but recovers at a longer length;
--   fail_trials / fail_passes  the answers and passes summed over the positions at l_fail.
-- report/boundary.cc computes the same from v_heatmap cells; tests check they agree.
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
         SUM(pending) AS pending
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
       a.trials, a.passes, a.errors, a.pending
FROM agg a
LEFT JOIN ls f
  ON f.campaign_id = a.campaign_id AND f.config = a.config AND f.context_length = a.l_fail;

-- Indexer probes per (campaign, configuration, indexer layer), over the answers (pass / miss) of
-- the latest result of each job that carried probes:
--   in_topk_last            answers where the needle's entry was selected at the last prompt
--                           position (the one that produces the answer);
--   pass_in_topk_last       of those, the ones that passed;
--   visible                 answers where the needle was visible at some probed position;
--   median_rank             over the visible answers, the median of each answer's median needle
--                           rank (probes.needle_rank_median; NULL if none was visible);
--   mean_in_topk_fraction   mean fraction of probed positions that selected the needle;
--   best_rank               the best (lowest) rank seen at any probed position of any answer.
CREATE VIEW v_probe_summary AS
WITH p AS (
  SELECT c.campaign_id, c.config, pr.layer, c.outcome, pr.in_topk_last, pr.needle_rank_median,
         pr.in_topk_fraction, pr.needle_rank_min
  FROM v_campaign_jobs c
  JOIN probes pr ON pr.result_id = c.result_id
  WHERE c.outcome IN ('pass', 'miss')
),
ranked AS (
  SELECT campaign_id, config, layer, needle_rank_median AS rank,
         ROW_NUMBER() OVER (PARTITION BY campaign_id, config, layer
                            ORDER BY needle_rank_median) AS rn,
         COUNT(*) OVER (PARTITION BY campaign_id, config, layer) AS n
  FROM p
  WHERE needle_rank_median >= 0
),
med AS (
  SELECT campaign_id, config, layer, AVG(rank) AS median_rank
  FROM ranked
  WHERE rn IN ((n + 1) / 2, (n + 2) / 2)
  GROUP BY campaign_id, config, layer
),
agg AS (
  SELECT campaign_id, config, layer,
         COUNT(*) AS answers,
         SUM(CASE WHEN outcome = 'pass' THEN 1 ELSE 0 END) AS passes,
         SUM(in_topk_last) AS in_topk_last,
         SUM(CASE WHEN in_topk_last = 1 AND outcome = 'pass' THEN 1 ELSE 0 END)
           AS pass_in_topk_last,
         SUM(CASE WHEN needle_rank_median >= 0 THEN 1 ELSE 0 END) AS visible,
         AVG(in_topk_fraction) AS mean_in_topk_fraction,
         MIN(CASE WHEN needle_rank_min >= 0 THEN needle_rank_min END) AS best_rank
  FROM p
  GROUP BY campaign_id, config, layer
)
SELECT a.campaign_id, a.config, a.layer, a.answers, a.passes, a.in_topk_last,
       CAST(a.in_topk_last AS REAL) / a.answers AS in_topk_last_fraction,
       a.pass_in_topk_last, a.visible, m.median_rank, a.mean_in_topk_fraction, a.best_rank
FROM agg a
LEFT JOIN med m ON m.campaign_id = a.campaign_id AND m.config = a.config AND m.layer = a.layer;
