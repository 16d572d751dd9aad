"""The outbox's state machine, written down once: what a claim answers for a row in each
state, and every way a row moves.

storage/outbox.py's statements make these moves, and its claims answer from this table;
the publisher (gateway/delivery/) acts on the answers, one action per answer, and settles
an unknown outcome with one of the settlements below. `tests/storage/test_outbox_states.py`
checks that the states the SQL reads and writes are the table's.

    state     a claim answers   moves (event → state)
    (no row)  new               claim → sending (inserted, armed)
    sending   unknown           claim → sending (taken over; the call in flight keeps its
                                  deadline), arm → sending, call_uncertain → sending,
                                  call_refused → unsent, opened → open, mark_sent → sent;
                                  settled: found → sent, unverified → sent, orphan → open,
                                  absent → unsent
    unsent    new               claim → sending (armed), arm → sending, mark_sent → sent
    open      open              claim → open (taken over), release → unsent,
                                  mark_sent → sent
    sent      sent              mark_sent → sent (nothing more to do)

'sending': a call for the post may be under way or may have landed; 'unsent': nothing of
it is in the thread, the next claim posts; 'open': a streamed message shows it, not yet
complete; 'sent': it is in the thread.

Settlements (how a search of the thread ends an unknown outcome): `found` our post;
`orphan` a stream some attempt started for it whose ts was never recorded; `unverified`
the thread could not be read, so the post counts as delivered (the call that may have
posted it reached Slack); `absent` not there, so it is posted again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, TypeAlias

PostState: TypeAlias = Literal["sending", "unsent", "open", "sent"]
ClaimAnswer: TypeAlias = Literal["new", "unknown", "open", "sent"]
Settlement: TypeAlias = Literal["found", "orphan", "unverified", "absent"]
PostEvent: TypeAlias = Literal[
    "claim",
    "arm",
    "call_uncertain",
    "call_refused",
    "opened",
    "release",
    "mark_sent",
    "found",
    "orphan",
    "unverified",
    "absent",
]


@dataclass(frozen=True, slots=True)
class StateRule:
    """One state of an outbox row: what a claim that finds it answers, and the state each
    event allowed here moves it to (an event not listed does not apply: its statement
    changes nothing)."""

    answer: ClaimAnswer
    moves: Mapping[PostEvent, PostState]


def _rule(answer: ClaimAnswer, moves: Mapping[PostEvent, PostState]) -> StateRule:
    return StateRule(answer, MappingProxyType(dict(moves)))


OUTBOX_STATES: Mapping[PostState | None, StateRule] = MappingProxyType(
    {
        None: _rule("new", {"claim": "sending"}),  # no row yet: inserted, armed
        "sending": _rule(
            "unknown",
            {
                "claim": "sending",
                "arm": "sending",
                "call_uncertain": "sending",
                "call_refused": "unsent",
                "opened": "open",
                "mark_sent": "sent",
                "found": "sent",
                "unverified": "sent",
                "orphan": "open",
                "absent": "unsent",
            },
        ),
        "unsent": _rule("new", {"claim": "sending", "arm": "sending", "mark_sent": "sent"}),
        "open": _rule("open", {"claim": "open", "release": "unsent", "mark_sent": "sent"}),
        "sent": _rule("sent", {"mark_sent": "sent"}),
    }
)
"""The table (module docstring); the key None is a row that does not exist yet."""


def answer(state: PostState | None) -> ClaimAnswer:
    """What a claim that finds a row in `state` (None: no row) answers."""
    return OUTBOX_STATES[state].answer


def moved(state: PostState | None, event: PostEvent) -> PostState | None:
    """The state `event` moves a row in `state` to; None when it does not apply there."""
    return OUTBOX_STATES[state].moves.get(event)
