-- Where a session's sandbox_mode came from (reference §4.14 `sessionModeOrigin`), kept across
-- restarts: a mode the user toggled stays `user_toggle` when the session is loaded again.
-- Beyond reference §9.1, which records only the mode itself.
ALTER TABLE sessions
  ADD COLUMN sandbox_mode_origin TEXT NOT NULL DEFAULT 'session_default'
  CONSTRAINT sessions_sandbox_mode_origin_valid CHECK (sandbox_mode_origin IN ('session_default', 'user_toggle', 'inherited'));

UPDATE sessions SET sandbox_mode_origin = 'inherited' WHERE parent_session_id IS NOT NULL;
