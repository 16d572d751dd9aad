"""What `FakeSlack` answers to `conversations.info`: a conversation object, shared or not.

Slack answers `{"ok": true, "channel": {...}}` with the conversation object of the
reference (docs.slack.dev, Conversation object): for a channel `is_channel`, `is_private`,
`is_shared` (shared with any other workspace), `is_ext_shared` (with another
organization: Slack Connect), `is_org_shared` (with other workspaces of its own
Enterprise Grid organization), `is_pending_ext_shared` (an invitation to another
organization is out), `context_team_id` and `shared_team_ids`; for a direct message
(ids starting with D) `is_im`, `user` and `is_org_shared`, without the channel's sharing
flags. A call without `channel` answers `channel_not_found`, as Slack does (`refuse` on the
fake makes any channel answer so, or `missing_scope`).

    slack.channels.share("C0CONNECT01", external=True, teams=["T1", "T9"])

A channel id in `archived` answers with `is_archived` true; one in `deleted`,
`channel_not_found` (chat.postMessage refuses both: slack_api.py).

Kept here, not in `slack_api.py`, which only registers the method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeChannels:
    """How each channel is shared (unknown channels: ones of the home team only)."""

    team_id: str
    sharing: dict[str, dict[str, Any]] = field(default_factory=dict)
    archived: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)

    def share(
        self,
        channel: str,
        *,
        external: bool = True,
        pending: bool = False,
        org: bool = False,
        teams: list[str] | None = None,
    ) -> None:
        """Make `channel` shared: with another organization (`external`), with one soon
        (`pending`), or with workspaces of the same Enterprise Grid org (`org`)."""
        self.sharing[channel] = {
            "is_shared": external or org,
            "is_ext_shared": external,
            "is_org_shared": org,
            "is_pending_ext_shared": pending,
            "shared_team_ids": teams or [self.team_id],
        }

    def info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel") or "")
        if not channel or channel in self.deleted:
            return {"ok": False, "error": "channel_not_found"}
        if channel.startswith("D"):
            im = {"id": channel, "is_im": True, "is_org_shared": False, "user": "U0A1B2C3D4E"}
            return {"ok": True, "channel": im}
        shared = self.sharing.get(channel)
        flags = shared or {
            "is_shared": False,
            "is_ext_shared": False,
            "is_org_shared": False,
            "is_pending_ext_shared": False,
            "shared_team_ids": [self.team_id],
        }
        return {
            "ok": True,
            "channel": {
                "id": channel,
                "name": channel.lower(),
                "is_channel": True,
                "is_group": False,
                "is_im": False,
                "is_mpim": False,
                "is_private": False,
                "is_archived": channel in self.archived,
                "is_member": True,
                "context_team_id": self.team_id,
                "pending_shared": [],
                "pending_connected_team_ids": [],
                **flags,
            },
        }
