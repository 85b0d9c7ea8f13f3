-- What `conform serve` has read in the allowlist: per (suite, provider), when the newest
-- statement about it was made (a grant's generated_at, a revocation's at; under a trust
-- file only statements signed by a listed key). An entry made before it is denied
-- (`superseded`): an older allowlist put back in place of a newer one permits nothing,
-- across restarts and across every process sharing the ledger.
CREATE TABLE allowlist_seen (
    suite        TEXT    NOT NULL,
    provider     TEXT    NOT NULL,
    -- When the newest statement was made: Unix nanoseconds (UTC).
    statement_ns BIGINT  NOT NULL,
    -- When it was first read, Unix milliseconds (UTC): for people.
    seen_ms      BIGINT  NOT NULL,
    PRIMARY KEY (suite, provider)
);
