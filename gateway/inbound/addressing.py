"""Whom a thread reply speaks to: a reply that opens by addressing someone else is theirs.

In a thread the bot takes part in, people also talk to each other. A reply that opens
with a mention of another person (`<@U2> can you check?`, after any leading whitespace,
in any of Slack's forms: `<@U2>`, `<@U2|ada>`) is addressed to them, and the bot stays
quiet: the gatekeeper ignores it before admission, so it costs no task and no model call.
A reply that mentions the bot anywhere (`<@U2> and <@UBOT>, what do you think?`) is
always the bot's. Only the opening counts: a mention further on (`thanks, <@U2> said…`)
speaks *about* someone, not to them, and the bot answers as before.

When the bot's own id is unknown (None), an opening mention is taken as someone else's:
Slack's own `app_mention` for the bot reaches the gatekeeper marked as a mention all the
same (`InboundTurn.mentioned`), so no message meant for the bot goes unanswered.
"""

from __future__ import annotations

import re

from gateway.text.markup import mentioned_user_ids

# A user mention as Slack writes it in a message's raw text: `<@U123>` or `<@U123|name>`.
_OPENING_MENTION = re.compile(r"<@([^<>|\s]+)(?:\|[^<>]*)?>")


def opening_mention(text: str) -> str | None:
    """The user id a message opens with (leading whitespace skipped), or None."""
    match = _OPENING_MENTION.match(text.lstrip())
    return match.group(1) if match else None


def addresses_someone_else(text: str, bot_user_id: str | None) -> bool:
    """Whether the message opens by addressing someone other than the bot and never
    mentions the bot (module docstring)."""
    if bot_user_id is not None and bot_user_id in mentioned_user_ids(text):
        return False
    return opening_mention(text) is not None
