"""Slack installations and OAuth states in Postgres, for the many-workspaces mode.

Slack's OAuth v2 install flow ends with a bot token per workspace (or per enterprise, for an
org-wide install on Enterprise Grid); the gateway keeps them here, one row per completed
install. The semantics are slack_sdk's installation stores' (its SQLAlchemy one is the
reference): a workspace is (client id, enterprise id, team id) with NULLs compared as
equal, an org-wide install has no team, and the latest install of a workspace wins — a
reinstall with more scopes simply adds a newer row. `gateway.slack.workspaces` adapts this to
slack_sdk's `AsyncInstallationStore`; storage/ stays free of Slack types.

The bot token is a secret. Only `find` (and `seal_stored`) reads it; `installations` —
what `doctor` and operators see — selects every column but that one, and nothing here
logs a row. With a `TokenCipher` (THREADGATE_TOKEN_KEY, storage/token_cipher.py) it is
stored sealed, and `seal_stored` seals the rows stored before the key was set: each
gateway calls it at start-up. It is safe to run anywhere at once: a row is sealed by an
UPDATE that finds it still holding the plaintext it read, so of two replicas sealing the
same row one writes and the other finds nothing left to do, and a row sealed already is
never read as plaintext again.

OAuth states are one-use and expire. Anyone may ask for one (the install page is public),
so issuing one stores nothing: it is signed where it is made (gateway/slack/oauth.py), and
only a state that comes back with Slack's redirect is written, by `use`, which refuses it
when stale or seen before. A flood of visits of the install page writes nothing and
locks no installer out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from storage.database import Database
from storage.erasure import finish_erasure
from storage.errors import translate_errors
from storage.queue import InterventionRefused, UnknownTask, cancel_task
from storage.token_cipher import SEALED, TokenCipher, open_token


@dataclass(frozen=True, slots=True, repr=False)
class StoredInstallation:
    """One completed install (`repr` leaves the token out: rows end up in tracebacks)."""

    client_id: str
    enterprise_id: str | None
    team_id: str | None
    bot_token: str
    bot_id: str | None = None
    bot_user_id: str | None = None
    bot_scopes: str = ""
    enterprise_name: str | None = None
    team_name: str | None = None
    is_enterprise_install: bool = False
    app_id: str | None = None
    installer_user_id: str | None = None
    installed_at: datetime | None = None

    def __repr__(self) -> str:
        return (
            f"StoredInstallation(enterprise_id={self.enterprise_id!r}, team_id={self.team_id!r}, "
            f"team_name={self.team_name!r}, bot_user_id={self.bot_user_id!r})"
        )


@dataclass(frozen=True, slots=True)
class InstallationSummary:
    """What an operator may see of an installation: who, never the token."""

    enterprise_id: str | None
    team_id: str | None
    team_name: str | None
    enterprise_name: str | None
    is_enterprise_install: bool
    bot_user_id: str | None
    installed_at: datetime


_INSERT = """
INSERT INTO slack_installations (client_id, app_id, enterprise_id, enterprise_name, team_id,
    team_name, is_enterprise_install, bot_token, bot_id, bot_user_id, bot_scopes,
    installer_user_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
"""

_WORKSPACE = """
client_id = $1 AND enterprise_id IS NOT DISTINCT FROM $2 AND team_id IS NOT DISTINCT FROM $3
"""

_FIND = f"""
SELECT * FROM slack_installations
WHERE {_WORKSPACE} AND bot_token IS NOT NULL AND ($4::text IS NULL OR installer_user_id = $4)
ORDER BY installed_at DESC, id DESC LIMIT 1
"""

# Every column but bot_token, on purpose (see the module docstring).
_SUMMARIES = """
SELECT DISTINCT ON (enterprise_id, team_id) enterprise_id, team_id, team_name,
       enterprise_name, is_enterprise_install, bot_user_id, installed_at
FROM slack_installations WHERE client_id = $1 AND bot_token IS NOT NULL
ORDER BY enterprise_id, team_id, installed_at DESC, id DESC
"""


# Rows still holding a token as Slack issued it, `$3` at a time after id `$2`.
_UNSEALED = f"""
SELECT id, bot_token FROM slack_installations
WHERE client_id = $1 AND id > $2 AND bot_token IS NOT NULL AND bot_token NOT LIKE '{SEALED}%'
ORDER BY id LIMIT $3
"""
# Each row sealed only if it still holds the plaintext it was read with.
_SEAL = """
UPDATE slack_installations AS stored SET bot_token = sealed.token
FROM unnest($1::bigint[], $2::text[], $3::text[]) AS sealed(id, plain, token)
WHERE stored.id = sealed.id AND stored.bot_token = sealed.plain
"""
_COUNT_UNSEALED = f"""
SELECT count(*) FROM slack_installations
WHERE client_id = $1 AND bot_token IS NOT NULL AND bot_token NOT LIKE '{SEALED}%'
"""
_SEAL_BATCH = 100


class PostgresInstallations:
    """The installations of one Slack app (`client_id`)."""

    def __init__(self, db: Database, client_id: str, *, cipher: TokenCipher | None = None) -> None:
        self._db = db
        self.client_id = client_id
        self._cipher = cipher

    @translate_errors("The Slack installation could not be saved")
    async def save(self, found: StoredInstallation) -> None:
        """Store an install; a pending erasure of the workspace (an earlier uninstall) is
        finished first, so nothing of this installation is erased with it."""
        enterprise_id, team_id = workspace_key(
            found.enterprise_id, found.team_id, found.is_enterprise_install
        )
        if (key := team_id or enterprise_id) is not None:
            await finish_erasure(self._db, key)
        await self._db.pool.execute(
            _INSERT,
            self.client_id,
            found.app_id,
            enterprise_id,
            found.enterprise_name,
            team_id,
            found.team_name,
            found.is_enterprise_install,
            self._cipher.seal(found.bot_token) if self._cipher else found.bot_token,
            found.bot_id,
            found.bot_user_id,
            found.bot_scopes,
            found.installer_user_id,
        )

    @translate_errors("The Slack installation could not be read")
    async def find(
        self,
        enterprise_id: str | None,
        team_id: str | None,
        *,
        is_enterprise_install: bool = False,
        user_id: str | None = None,
    ) -> StoredInstallation | None:
        """The latest install of the workspace (by `user_id` if given), or None."""
        key = workspace_key(enterprise_id, team_id, is_enterprise_install)
        row = await self._db.pool.fetchrow(_FIND, self.client_id, *key, user_id)
        if row is None:
            return None
        fields = {k: row[k] for k in StoredInstallation.__slots__ if k != "client_id"}
        fields["bot_token"] = open_token(row["bot_token"], self._cipher)
        return StoredInstallation(client_id=self.client_id, **fields)

    @translate_errors("The Slack installation could not be deleted")
    async def delete(
        self, enterprise_id: str | None, team_id: str | None, *, user_id: str | None = None
    ) -> int:
        """Forget the workspace's installs (those of `user_id`, if given); how many."""
        result = await self._db.pool.execute(
            f"DELETE FROM slack_installations WHERE {_WORKSPACE}"
            " AND ($4::text IS NULL OR installer_user_id = $4)",
            self.client_id,
            enterprise_id,
            team_id,
            user_id,
        )
        return int(result.split()[-1])

    @translate_errors("The Slack bot token could not be deleted")
    async def delete_bot(self, enterprise_id: str | None, team_id: str | None) -> None:
        """Forget the workspace's bot tokens; the rest of its installs stays on record."""
        await self._db.pool.execute(
            "UPDATE slack_installations SET bot_token = NULL, bot_id = NULL, bot_user_id = NULL"
            f" WHERE {_WORKSPACE}",
            self.client_id,
            enterprise_id,
            team_id,
        )

    @translate_errors("The stored Slack bot tokens could not be sealed")
    async def seal_stored(self) -> int:
        """Seal every bot token stored as issued (before THREADGATE_TOKEN_KEY was set);
        how many this call sealed. Nothing to do without a cipher."""
        if self._cipher is None:
            return 0
        sealed, after = 0, 0
        while rows := await self._db.pool.fetch(_UNSEALED, self.client_id, after, _SEAL_BATCH):
            plain = [row["bot_token"] for row in rows]
            result = await self._db.pool.execute(
                _SEAL,
                [row["id"] for row in rows],
                plain,
                [self._cipher.seal(token) for token in plain],
            )
            sealed += int(result.split()[-1])
            after = rows[-1]["id"]
        return sealed

    @translate_errors("The stored Slack bot tokens could not be counted")
    async def unsealed(self) -> int:
        """How many bot tokens are stored as issued, not sealed."""
        count: int = await self._db.pool.fetchval(_COUNT_UNSEALED, self.client_id)
        return count

    @translate_errors("The Slack installations could not be listed")
    async def installations(self) -> list[InstallationSummary]:
        """Every workspace with a bot token, oldest install first; no tokens."""
        rows = await self._db.pool.fetch(_SUMMARIES, self.client_id)
        summaries = [InstallationSummary(**dict(row)) for row in rows]
        return sorted(summaries, key=lambda s: s.installed_at)


def workspace_key(
    enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool
) -> tuple[str | None, str | None]:
    """(enterprise, team) as stored: an org-wide install belongs to its enterprise, no team."""
    return (enterprise_id, None) if is_enterprise_install else (enterprise_id, team_id)


# A state seen back from Slack: written once, while it is fresh; the expired ones swept.
_USE = """
WITH swept AS (
    DELETE FROM slack_oauth_states WHERE expires_at <= now()
)
INSERT INTO slack_oauth_states (state, expires_at)
SELECT $1, to_timestamp($2) WHERE to_timestamp($2) > now()
ON CONFLICT (state) DO NOTHING
RETURNING true
"""


class PostgresOAuthStates:
    """The OAuth `state` values that came back from Slack, each good for one redirect
    within `expiration_seconds` of its issue. Issuing writes nothing (the state is signed
    where it is made, gateway/slack/oauth.py): only a state that comes back is written, so
    visits of the public install page cost no row and cannot fill anything."""

    def __init__(self, db: Database, *, expiration_seconds: float = 600.0) -> None:
        self._db = db
        self.expiration_seconds = expiration_seconds

    @translate_errors("The OAuth state could not be checked")
    async def use(self, state: str, expires_at: float) -> bool:
        """Whether `state` (expiring at Unix time `expires_at`) is fresh and seen for the
        first time; it is refused from then on."""
        used: bool | None = await self._db.pool.fetchval(_USE, state, expires_at)
        return bool(used)


_WORKSPACE_TASKS = """
SELECT id FROM tasks
WHERE state IN ('queued', 'running', 'waiting')
  AND ($1::text IS NULL OR address->>'team' = $1)
  AND ($2::text IS NULL OR address->>'enterprise' = $2)
"""


@translate_errors("The workspace's tasks could not be listed")
async def _unfinished_tasks(
    db: Database, team_id: str | None, enterprise_id: str | None
) -> list[str]:
    if team_id is None and enterprise_id is None:
        return []  # not every task of every workspace
    return [row["id"] for row in await db.pool.fetch(_WORKSPACE_TASKS, team_id, enterprise_id)]


async def cancel_workspace_tasks(
    db: Database, team_id: str | None, *, actor: str, enterprise_id: str | None = None
) -> list[str]:
    """Cancel every unfinished task of a workspace (the app was uninstalled there) — of
    every workspace of `enterprise_id` when `team_id` is None (an org-wide install) —, each
    through the operators' cancel path, so nothing more is posted for it; the ids cancelled.
    A task already posting its last message is left to end: its token is gone anyway."""
    cancelled = []
    for task_id in await _unfinished_tasks(db, team_id, enterprise_id):
        try:
            await cancel_task(db, task_id, actor=actor, reason="the app was uninstalled")
        except (InterventionRefused, UnknownTask):
            continue
        cancelled.append(task_id)
    return cancelled
