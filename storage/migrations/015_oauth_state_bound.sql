-- OAuth states are issued to anonymous requests (GET /slack/install): `issue` sweeps the
-- expired ones and refuses a new one past a bound, both reading by expiry (issue 37).
CREATE INDEX slack_oauth_states_expiry ON slack_oauth_states (expires_at);
