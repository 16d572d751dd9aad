"""THREADGATE_TOKEN_KEY seals the bot tokens stored before it was set, once, however many
replicas do it at the same time (issue 37, item 8)."""

from __future__ import annotations

import asyncio
import contextlib

from cryptography.fernet import Fernet

from storage import Database, PostgresInstallations, TokenCipher
from tests.pg import create_database
from tests.storage.test_installations import CLIENT, installed

KEY = Fernet.generate_key().decode()
TOKENS = {f"T{n}": f"xoxb-plain-token-{n:03d}" for n in range(250)}  # more than one batch


async def stored_tokens(db: Database) -> dict[str, str]:
    rows = await db.pool.fetch("SELECT team_id, bot_token FROM slack_installations")
    return {row["team_id"]: row["bot_token"] for row in rows}


async def plain_rows(db: Database) -> None:
    store = PostgresInstallations(db, CLIENT)
    for team, token in TOKENS.items():
        await store.save(installed(team, token))
    await PostgresInstallations(db, "999.888").save(installed("TOTHER", "xoxb-other-app"))


async def test_rows_stored_before_the_key_are_sealed_once(fresh_db: Database) -> None:
    """Every plaintext token of the app is sealed and still opens to itself; sealing again
    finds nothing to do; another app's rows are not its to touch."""
    await plain_rows(fresh_db)
    store = PostgresInstallations(fresh_db, CLIENT, cipher=TokenCipher(KEY))
    assert await store.unsealed() == len(TOKENS)
    assert await store.seal_stored() == len(TOKENS)
    stored = await stored_tokens(fresh_db)
    assert stored.pop("TOTHER") == "xoxb-other-app"
    fernet = Fernet(KEY.encode())
    for team, sealed in stored.items():
        assert sealed.startswith("fernet:") and TOKENS[team] not in sealed
        assert fernet.decrypt(sealed.removeprefix("fernet:").encode()).decode() == TOKENS[team]
    assert await store.seal_stored() == 0 and await store.unsealed() == 0
    found = await store.find(None, "T7")
    assert found is not None and found.bot_token == TOKENS["T7"]


async def test_replicas_sealing_at_once_seal_each_row_once(postgres_dsn: str) -> None:
    """Three replicas (each its own pool) seal at the same moment: together they seal each
    row exactly once — none is sealed twice, which would no longer open to its token."""
    dsn = await create_database(postgres_dsn, "token_sealing_replicas")
    async with contextlib.AsyncExitStack() as stack:
        replicas = [await stack.enter_async_context(Database(dsn)) for _ in range(3)]
        await plain_rows(replicas[0])
        stores = [PostgresInstallations(db, CLIENT, cipher=TokenCipher(KEY)) for db in replicas]
        counts = await asyncio.gather(*(store.seal_stored() for store in stores))
        assert sum(counts) == len(TOKENS)
        for team, token in TOKENS.items():
            found = await stores[0].find(None, team)
            assert found is not None and found.bot_token == token


async def test_without_a_key_nothing_is_sealed(fresh_db: Database) -> None:
    """No THREADGATE_TOKEN_KEY: the rows stay as they are, and are counted as unsealed."""
    await plain_rows(fresh_db)
    store = PostgresInstallations(fresh_db, CLIENT)
    assert await store.seal_stored() == 0 and await store.unsealed() == len(TOKENS)
