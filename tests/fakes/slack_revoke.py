"""`auth.revoke` on the fake Slack, as Slack's reference describes it: the calling token
(its `token` argument, or the Authorization header slack_sdk sends) is revoked and the
answer is `{"ok": true, "revoked": true}`; with `test` set (1 or true) nothing is revoked
and `revoked` is false. A token revoked already answers `token_revoked`, like every other
method (`FakeOAuth.answer` checks that first).

Registered by `FakeOAuth.answer` (tests/fakes/slack_oauth.py) for the workspaces' tokens;
`FakeOAuth.revoked` keeps the record, so a test can assert which token was revoked."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

METHOD = "auth.revoke"


def revoke(
    token: str, params: Mapping[str, Any], revoke_token: Callable[[str], None]
) -> dict[str, Any]:
    """Slack's answer to `auth.revoke` made with `token`; revokes it unless `test`."""
    testing = str(params.get("test", "")).lower() in ("1", "true")
    if not testing:
        revoke_token(token)
    return {"ok": True, "revoked": not testing}
