"""Why a file was not read: the reasons, in words for the model and the user, and the
exception that carries one.

A leaf on purpose: the decoder processes (`gateway.inbound.decoder_process`) raise these
too, and must start without importing the rest of the gateway (`agent` alone costs
seconds of CPU to import).
"""

from __future__ import annotations


class NotRead(Exception):
    """A file was not read; `reason` says why, in words for the model and the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# The download (gateway/inbound/files.py).
TOO_LARGE = "too large"
DOWNLOAD_FAILED = "download failed"
OUT_OF_TIME = "not downloaded in time"
NOT_FROM_SLACK = "not stored in Slack"
# A file Slack gives only by id (gateway/slack/file_info.py).
NOT_DESCRIBED = "Slack did not describe it to the bot (files.info)"
# The bytes (gateway/inbound/file_contents.py).
NOT_AN_IMAGE = "not a readable image"
TOO_LARGE_DECODED = "too large once decoded"
NOT_TEXT = "not text (not UTF-8)"
NOT_A_PDF = "not a readable PDF"
NO_TEXT_LAYER = "no text layer"
# The decoder processes (gateway/inbound/decoders.py).
TOO_SLOW = "too slow to read (stopped at the time limit)"
BUSY = "too many files were being read at once"
DECODER_FAILED = "the reader failed on it"
