-- 0005_drop_attempts_running: one index fewer on the coordinator's hot path.
--
-- attempts_running (job_key WHERE status = 'running') duplicated what the primary key
-- (job_key, attempt) of the WITHOUT ROWID attempts table already gives: every lookup of a job's
-- running attempts names the job, and the primary key's job_key prefix finds its few attempts
-- directly. Keeping it cost two random-page index writes per job (insert on lease, delete on
-- result), in a table keyed by random SHA-256 keys: about a sixth of the pages a job dirties.
-- Restart recovery's scan of all running attempts (Store::RequeueLeased) reads the table once.
DROP INDEX IF EXISTS attempts_running;
