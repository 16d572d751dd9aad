-- Slack installations (OAuth mode, many workspaces): one row per completed install, the
-- latest row of a workspace (or, for an org-wide install, of an enterprise) wins. The bot
-- token is a secret: only storage.installations reads it, and only to hand it to the Slack
-- client of its workspace; nothing that lists or inspects installations selects it.
CREATE TABLE slack_installations (
    id                    bigserial PRIMARY KEY,
    client_id             text NOT NULL,
    app_id                text,
    enterprise_id         text,
    enterprise_name       text,
    team_id               text,
    team_name             text,
    is_enterprise_install boolean NOT NULL DEFAULT false,
    bot_token             text,
    bot_id                text,
    bot_user_id           text,
    bot_scopes            text NOT NULL DEFAULT '',
    installer_user_id     text,
    installed_at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX slack_installations_workspace
    ON slack_installations (client_id, enterprise_id, team_id, installed_at DESC);

-- The OAuth flow's `state` values: issued by /slack/install, consumed once by the redirect.
CREATE TABLE slack_oauth_states (
    state       text PRIMARY KEY,
    expires_at  timestamptz NOT NULL
);
