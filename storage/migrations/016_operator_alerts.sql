-- Operator alerts, throttled for the whole deployment (issue 37): one row per kind of
-- failure (a refused credential on a route, an exhausted quota, Slack refusing a token)
-- holding its current window. The failure that opened the window holds its `claim` and
-- sends the window's alert; the failures after it in the window only count themselves
-- (`suppressed`), and the next window's alert says how many were held back
-- (storage/alert_windows.py).
CREATE TABLE operator_alerts (
    key text PRIMARY KEY,
    claim text NOT NULL,
    state text NOT NULL CHECK (state IN ('sending', 'sent', 'failed', 'logged')),
    opened_at timestamptz NOT NULL,
    first_seen timestamptz NOT NULL,
    last_seen timestamptz NOT NULL,
    suppressed integer NOT NULL DEFAULT 0 CHECK (suppressed >= 0)
);
