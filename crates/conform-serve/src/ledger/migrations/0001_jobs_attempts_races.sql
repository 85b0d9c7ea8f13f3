-- One SQL subset for SQLite and PostgreSQL. Times are Unix milliseconds (UTC).

-- A job: the durable record of one user intent, bound to its idempotency key for life.
CREATE TABLE jobs (
    id              TEXT    PRIMARY KEY,
    owner_id        TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    -- sha256 of the RFC 8785 canonical request body: a replay must match it.
    fingerprint     TEXT    NOT NULL,
    task            TEXT    NOT NULL,
    provider        TEXT    NOT NULL,
    input           TEXT    NOT NULL,
    -- Incremented by the winning result and by a job cancel, never by anything else.
    version         BIGINT  NOT NULL,
    completed_by    TEXT,
    result          TEXT,
    completed_ms    BIGINT,
    cancelled_ms    BIGINT,
    created_ms      BIGINT  NOT NULL,
    CONSTRAINT jobs_owner_key UNIQUE (owner_id, idempotency_key),
    CONSTRAINT jobs_result_with_winner CHECK ((completed_by IS NULL) = (result IS NULL))
);

-- An attempt: one provider call made for a job.
CREATE TABLE attempts (
    id           TEXT    PRIMARY KEY,
    job_id       TEXT    NOT NULL REFERENCES jobs (id),
    -- 1, 2, 3 … within the job: the order attempts were started in.
    seq          BIGINT  NOT NULL,
    provider     TEXT    NOT NULL,
    state        TEXT    NOT NULL CHECK (state IN
                 ('starting', 'unknown', 'cancelled', 'succeeded', 'superseded', 'failed')),
    -- The job's version when the attempt started: the compare-and-swap expects it.
    base_version BIGINT  NOT NULL,
    error        TEXT,
    started_ms   BIGINT  NOT NULL,
    -- Kept so that a restarted orchestrator can time out what it did not send itself.
    deadline_ms  BIGINT  NOT NULL,
    ended_ms     BIGINT,
    CONSTRAINT attempts_job_seq UNIQUE (job_id, seq)
);

-- At most one open attempt per job, enforced by the database. It holds only open
-- attempts, so the deadline sweeper scans it too (see `expire_overdue`).
CREATE UNIQUE INDEX attempts_one_open ON attempts (job_id) WHERE state IN ('starting', 'unknown');

-- The race log: one row per result that arrived and did not win.
CREATE TABLE races (
    id             TEXT    PRIMARY KEY,
    job_id         TEXT    NOT NULL REFERENCES jobs (id),
    loser_attempt  TEXT    NOT NULL REFERENCES attempts (id),
    -- NULL when the job was cancelled before any result won.
    winner_attempt TEXT    REFERENCES attempts (id),
    loser_started_ms BIGINT NOT NULL,
    winner_completed_ms BIGINT,
    lost_ms        BIGINT  NOT NULL,
    reason         TEXT    NOT NULL CHECK (reason IN ('completed', 'job_cancelled', 'serialization_failure'))
);

CREATE INDEX races_job ON races (job_id);
