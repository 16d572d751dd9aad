"""The outbox's state table and its SQL agree: the states the statements read and write
are the table's and the schema's, and each statement moves a row as the table says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import storage.outbox
from storage import OUTBOX_STATES, ClaimAnswer, PostEvent
from storage.outbox import MOVES

MIGRATIONS = Path(storage.__file__).parent / "migrations"
STATES: frozenset[str] = frozenset(s for s in OUTBOX_STATES if s is not None)
# The lease fence reads the task's state ('running'), not the row's.
_FENCE = re.compile(r"SELECT true FROM tasks.*?FOR SHARE", re.DOTALL)
_LITERAL = re.compile(r"'(\w+)'")


def _sql(statement: str) -> str:
    return _FENCE.sub("", statement)


def _statements() -> dict[str, str]:
    return {
        name: _sql(value)
        for name, value in vars(storage.outbox).items()
        if name.startswith("_") and isinstance(value, str) and "outbox" in value
    }


def _written(statement: str) -> set[str]:
    """The states `statement` sets a row to (an insert's, a SET's, a CASE's results)."""
    found = [
        state
        for clause in re.findall(r"\bSET\b(.*?)(?:\bFROM\b|\bWHERE\b|$)", statement, re.DOTALL)
        for state in re.findall(r"(?<![.\w])state\s*=\s*'(\w+)'", clause)
    ]
    found += re.findall(r"(?:VALUES \(|SELECT )\$1, '(\w+)'", statement)
    found += re.findall(r"THEN '(\w+)'", statement)
    return set(found)


def _required(statement: str) -> set[str]:
    """The states a row must be in for `statement`'s update to apply to it."""
    where = statement.partition("WHERE")[2]
    if match := re.search(r"\bstate\s*=\s*'(\w+)'", where):
        return {match[1]}
    if match := re.search(r"\bstate\s+IN\s*\(([^)]*)\)", where):
        return set(_LITERAL.findall(match[1]))
    if match := re.search(r"\bstate\s*<>\s*'(\w+)'", where):
        return set(STATES) - {match[1]}
    return set(STATES)


def _moves(event: PostEvent) -> dict[str, str]:
    """The table's moves on `event`: state before → state after."""
    return {
        state: rule.moves[event]
        for state, rule in OUTBOX_STATES.items()
        if state is not None and event in rule.moves
    }


def test_every_state_the_sql_names_is_in_the_table() -> None:
    """No statement of storage/outbox.py reads or writes a state the table lacks."""
    named = {literal for sql in _statements().values() for literal in _LITERAL.findall(sql)}
    assert named - STATES == set()


def test_the_schema_allows_exactly_the_tables_states() -> None:
    """The latest outbox_state_check constraint lists the table's states, no more."""
    checks = [
        match[1]
        for path in sorted(MIGRATIONS.glob("*.sql"))
        for match in re.finditer(
            r"outbox_state_check\s+CHECK \(state IN \(([^)]*)\)\)", path.read_text()
        )
    ]
    assert set(_LITERAL.findall(checks[-1])) == STATES


def test_each_statement_moves_a_row_as_the_table_says() -> None:
    """A move's statement applies in the states the table moves on that event (exactly
    those, when it names any), and sets the state the table names (or leaves it)."""
    for event, statement in MOVES.items():
        sql, moves = _sql(statement), _moves(event)
        required = _required(sql)
        assert set(moves) <= required, event
        if required != STATES:
            assert set(moves) == required, event
        written = _written(sql)
        if written:
            assert set(moves.values()) == written, event
        else:
            assert all(after == before for before, after in moves.items()), event


def test_a_claim_moves_a_row_as_the_table_says() -> None:
    """A claim inserts a new row in the table's state, arms what the table arms, takes
    over what the table leaves in its state, and writes nothing where it has no move."""
    claim = _sql(storage.outbox._CLAIM)
    assert _written(storage.outbox._INSERT) == {OUTBOX_STATES[None].moves["claim"]}
    assert _written(claim) >= {OUTBOX_STATES[None].moves["claim"]}
    armed = dict(re.findall(r"WHEN e\.state = '(\w+)' THEN '(\w+)'", claim))
    untouched = set(re.findall(r"e\.state <> '(\w+)'", claim))
    for state in STATES:
        after = OUTBOX_STATES[state].moves.get("claim")
        expected = None if state in untouched else armed.get(state, state)
        assert after == expected, state


def test_every_claim_answer_is_given_in_some_state() -> None:
    """Each answer a claim can give is the answer of some state (none is dead code)."""
    assert {rule.answer for rule in OUTBOX_STATES.values()} == set(get_args(ClaimAnswer))


def test_the_finishs_mark_moves_a_row_as_mark_sent() -> None:
    """The mark a task's finish makes of its reply's posts (storage/queue.py) applies in
    every state mark_sent applies in, and sets what mark_sent sets."""
    sql = _sql(storage.outbox.sent_posts("$8", "$9"))
    moves = _moves("mark_sent")
    assert set(moves) <= _required(sql)
    assert _written(sql) == set(moves.values())
