-- What the host that runs a session wants to find again when it continues it (the CLI keeps the
-- model, API and base URL there): a JSON object the runtime stores and never reads.
-- Beyond reference §9.1, which has no place for a host's own settings.
ALTER TABLE sessions
  ADD COLUMN client_settings JSONB NULL
  CONSTRAINT sessions_client_settings_object CHECK (client_settings IS NULL OR jsonb_typeof(client_settings) = 'object');
