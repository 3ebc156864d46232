-- Session ownership for several runtime processes on one Postgres (issue 15). Beyond reference §9,
-- which assumes one process per database.
--
-- A session is owned by at most one live core: `owner_id` (NULL: free) until `expires_at`, which
-- the owner pushes forward while it runs. `token` is the fencing token: it grows by one with every
-- acquisition and every takeover, so a stale owner's writes, which carry the token it was given,
-- never match again. A turn records the token it began under (`turns.lease_token`); every write of
-- a turn's facts checks that the lease still carries it.
CREATE TABLE session_leases (
  session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
  owner_id TEXT,
  token BIGINT NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL,
  CONSTRAINT session_leases_token_positive CHECK (token > 0)
);

CREATE INDEX ix_session_leases_owner ON session_leases (owner_id) WHERE owner_id IS NOT NULL;

ALTER TABLE turns ADD COLUMN lease_token BIGINT;
