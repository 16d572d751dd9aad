"""Our interactive Block Kit elements — the buttons people click — and the ids both ends of
a click agree on.

Delivery puts them on messages (gateway/delivery/approval.py, gateway/delivery/publisher.py);
inbound reads the clicks (gateway/inbound/interactions.py). Slack sends a click back as a
`block_actions` interaction payload whose action carries the element's `action_id`, its
`type` and the `value` of what was clicked (docs.slack.dev: "block_actions payload",
"Button element", "Context actions block", "Feedback buttons element"):

- an approval request's two buttons, in an `actions` block: approve (`style: primary`) and
  deny (`style: danger`), each with the request's id as its `value` — a tool call's
  (`task:…:approval:…`), or a schedule's that waits for its owner (`schedule:{id}`);
- a reply's native feedback buttons: a `feedback_buttons` element (a positive and a
  negative button, each with a `value`) in a `context_actions` block. The value says which
  reply and which way: `positive task:…:reply` (Slack allows 2,000 characters).
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

APPROVE = "threadgate_approve"
DENY = "threadgate_deny"
FEEDBACK = "threadgate_feedback"
ACTION_IDS = (APPROVE, DENY, FEEDBACK)

# A schedule's approval buttons carry its id after this (a tool call's start "task:").
SCHEDULE_VALUE = "schedule:"

Vote: TypeAlias = Literal["positive", "negative"]
_VALUE_LIMIT = 2000  # Slack's limit on a button's value


def approval_buttons(approval_id: str) -> dict[str, Any]:
    """The `actions` block that asks for a decision on the request `approval_id`."""
    return {
        "type": "actions",
        "block_id": "threadgate_approval",
        "elements": [
            _button(APPROVE, "Approve", "primary", approval_id),
            _button(DENY, "Deny", "danger", approval_id),
        ],
    }


def feedback_buttons(reply_id: str) -> dict[str, Any]:
    """The `context_actions` block with Slack's feedback buttons for the reply `reply_id`."""
    return {
        "type": "context_actions",
        "block_id": "threadgate_feedback",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK,
                "positive_button": _vote_button("👍", "positive", reply_id, "Good answer"),
                "negative_button": _vote_button("👎", "negative", reply_id, "Bad answer"),
            }
        ],
    }


def schedule_of(value: str) -> str | None:
    """The id of the schedule an approval button's value names; None if it names none."""
    schedule_id = value.removeprefix(SCHEDULE_VALUE)
    return schedule_id if schedule_id != value and schedule_id.isdigit() else None


def vote_of(value: str) -> tuple[Vote, str] | None:
    """(the vote, the reply id) a feedback button's value names; None if it names none."""
    vote, _, reply_id = value.partition(" ")
    if vote not in ("positive", "negative") or not reply_id:
        return None
    return ("positive" if vote == "positive" else "negative"), reply_id


def _button(action_id: str, text: str, style: str, value: str) -> dict[str, Any]:
    if len(value) > _VALUE_LIMIT:
        raise ValueError(f"a button's value is at most {_VALUE_LIMIT} characters")
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text},
        "style": style,
        "value": value,
    }


def _vote_button(emoji: str, vote: Vote, reply_id: str, label: str) -> dict[str, Any]:
    value = f"{vote} {reply_id}"
    if len(value) > _VALUE_LIMIT:
        raise ValueError(f"a button's value is at most {_VALUE_LIMIT} characters")
    return {
        "text": {"type": "plain_text", "text": emoji},
        "value": value,
        "accessibility_label": label,
    }
