-- 0006_drop_results_latest: one random-key index fewer on every committed result.
--
-- results_latest (job_key, id) served "the latest result of a job" (MAX(id) per job_key, in
-- v_results and v_campaign_jobs). The UNIQUE (job_key, attempt) constraint's index already
-- holds every result's job_key and id (an index entry carries its rowid, and id is the rowid),
-- so it answers the same lookups, covering, from the job's one or two entries. The second index
-- cost the coordinator a write to a random page of a second job_key-ordered b-tree per result.
DROP INDEX IF EXISTS results_latest;
