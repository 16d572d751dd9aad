"""An MCP server's JSON Schemas, checked at a cost bounded before the check starts.

A server declares what its tools take (`inputSchema`) and return (`outputSchema`), and we
check the model's arguments against the first (so the model reads a precise complaint and
repairs its call without a round trip) and the server's structured results against the
second (the SDK's `ClientSession.validate_tool_result`, which `agent.rounds.mcp_session`
points here). A schema is the server's to write, and a `pattern` in it is a regular
expression run on text the model wrote: `^(a+)+$` against forty `a`s and a `!` takes a
backtracking engine 2⁴⁰ steps. With the `jsonschema` package those steps are Python's
`re`, on the event loop: the gateway stopped acking Slack for minutes. A thread is no
bound (`re` holds the GIL while it matches), and overriding `jsonschema`'s `pattern` and
`patternProperties` keywords is not enough: its `additionalProperties` and
`unevaluatedProperties` call `re.search` on property names in private helpers.

So schemas are compiled by `jsonschema-rs`, where every regular expression of a schema
goes through one engine, `fancy-regex`: a pattern without look-around or backreferences
is handed to the `regex` crate, whose time is linear in the text, so `^(a+)+$` costs
nothing at all; the rest backtrack at most `BACKTRACK_LIMIT` times, and then the check
stops with `BacktrackLimitExceeded`, which the model reads as arguments that could not be
checked (a failed tool result naming the field). The bound counts steps, not seconds: the
same pattern and text get the same answer on a loaded machine, and a check never takes
long enough for one to matter. (Weighed and not taken: google-re2, linear but without
look-around, behind the same four `jsonschema` call sites; the `regex` module's `timeout=`,
a wall-clock bound whose outcome depends on load, behind the same call sites; a killable
child process per check, a process for what is microseconds of work; refusing "unsafe"
patterns when a tool is registered, for which no reliable test exists.)

A `$ref` is resolved within the schema only: a server cannot make the gateway fetch a
URL (`offline`). A schema `jsonschema-rs` cannot compile — invalid, a draft it does not
know, a `$ref` that does not resolve, a pattern too large to compile — gets no check
(`schema_check` is None): the arguments go through and the server validates them, as it
would anyway. The library is imported on first use: a gateway without MCP servers never
loads it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema_rs

__all__ = ["BACKTRACK_LIMIT", "SchemaCheck", "Verdict", "schema_check"]

BACKTRACK_LIMIT = 100_000
"""Backtracking steps one pattern may take on one value (look-around and backreferences
only; other patterns run in linear time). Far above what an honest pattern needs on a
tool argument, and far less work than anyone would notice."""

_PROBLEMS_SHOWN = 5
_PROBLEM_CHARS = 300


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a check found: `problems` the model can fix (`where: what`), and the places
    whose `pattern` could not be checked within the bound."""

    problems: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.problems and not self.unchecked


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    """One compiled schema; `verdict(value)` checks a value against it."""

    validator: jsonschema_rs.Validator

    def verdict(self, value: Any) -> Verdict:
        """The first few problems with `value`, and whatever could not be checked."""
        import jsonschema_rs  # loaded already: this check was compiled by it

        kinds = jsonschema_rs.ValidationErrorKind
        unmatched = (kinds.BacktrackLimitExceeded, kinds.RegexEngineFailure)
        problems, unchecked = [], []
        for error in itertools.islice(self.validator.iter_errors(value), 2 * _PROBLEMS_SHOWN):
            where = ".".join(map(str, error.instance_path)) or "input"
            if isinstance(error.kind, unmatched):
                unchecked.append(where)
            else:
                problems.append(f"{where}: {error.message}"[:_PROBLEM_CHARS])
        return Verdict(tuple(problems[:_PROBLEMS_SHOWN]), tuple(dict.fromkeys(unchecked)))


def schema_check(schema: Any) -> SchemaCheck | None:
    """A check for `schema`, or None when it cannot be compiled (the server checks)."""
    import jsonschema_rs  # a large native library, loaded only once a server is used

    if not isinstance(schema, dict | bool):
        return None
    try:
        validator = jsonschema_rs.validator_for(
            schema,
            pattern_options=jsonschema_rs.FancyRegexOptions(backtrack_limit=BACKTRACK_LIMIT),
            offline=True,
        )
    except Exception:  # invalid, unknown draft, unresolvable $ref, a pattern too large
        return None
    return SchemaCheck(validator)
