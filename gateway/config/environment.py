"""The process environment around `Settings`: the variables slack-bolt would read behind
the settings' back.

slack-bolt reads `SLACK_BOT_TOKEN`, `SLACK_SIGNING_SECRET`, `SLACK_CLIENT_ID` and
`SLACK_CLIENT_SECRET` from the process environment on its own when an app is built, and
then warns that the token it found "will be ignored" beside the client and `authorize` we
give it (or, with the client id and secret, sets up file-based OAuth stores we do not use,
and says so). The gateway gives bolt everything explicitly, so `serve` hands those variables
over once the settings hold them (`hand_over`): bolt builds the app from its arguments
alone, and the child processes `serve` starts (the file decoders, which read what
strangers upload) do not inherit the Slack credentials either.
"""

from __future__ import annotations

from collections.abc import MutableMapping

# What slack-bolt reads from the environment when an app is built (module docstring).
BOLT_READS = ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET")


def hand_over(environ: MutableMapping[str, str]) -> None:
    """Take the variables slack-bolt would read by itself out of `environ` (module
    docstring); call once the settings are read."""
    for name in BOLT_READS:
        environ.pop(name, None)
