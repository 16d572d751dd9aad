"""Bot tokens sealed at rest with `THREADGATE_TOKEN_KEY`, when one is set.

A database dump or backup of `slack_installations` would otherwise hand over a bot token
per workspace. With a key, every token is stored sealed — Fernet, from `cryptography`
(AES-128-CBC with an HMAC-SHA256 over it: a token cannot be read or altered without the
key) — as `fernet:…`, and opened only when it is handed to its workspace's Slack client.
Well-kept code made for exactly this, rather than our own use of a cipher.

Rows stored before a key was set stay readable (they carry no prefix) and are sealed when
a gateway with the key starts (`PostgresInstallations.seal_stored`); a sealed row read
without the key, or with another key, is a `TokenKeyError` naming the variable — never a
token passed to Slack as garbage.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken

from storage.errors import StorageError

SEALED = "fernet:"


class TokenKeyError(StorageError):
    """A sealed bot token cannot be opened: THREADGATE_TOKEN_KEY is missing or wrong."""


class TokenCipher:
    """Seals and opens bot tokens with one Fernet key (urlsafe base64 of 32 bytes)."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode("ascii"))  # a malformed key raises ValueError here

    def seal(self, token: str) -> str:
        return SEALED + self._fernet.encrypt(token.encode()).decode("ascii")

    def open(self, stored: str) -> str:
        try:
            return self._fernet.decrypt(stored.removeprefix(SEALED).encode("ascii")).decode()
        except (InvalidToken, UnicodeError):
            raise TokenKeyError(
                "THREADGATE_TOKEN_KEY does not open the stored bot tokens: put the key they "
                "were sealed with there (or reinstall the app in each workspace)."
            ) from None


def open_token(stored: str, cipher: TokenCipher | None) -> str:
    """The token as Slack issued it, from what the row holds."""
    if not stored.startswith(SEALED):
        return stored  # stored before a key was set
    if cipher is None:
        raise TokenKeyError(
            "The stored bot tokens are sealed: set THREADGATE_TOKEN_KEY to the key they "
            "were sealed with."
        )
    return cipher.open(stored)


def is_token_key(key: str) -> bool:
    """Whether `key` is a usable Fernet key."""
    try:
        TokenCipher(key)
    except (ValueError, UnicodeError):
        return False
    return True
