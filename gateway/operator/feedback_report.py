"""`threadgate feedback`: how people rated the replies, per prompt epoch and model.

Every final reply carries Slack's feedback buttons; each person's last vote on a reply is
stored with the prompt epoch and model that wrote it (storage/feedback.py). The report
counts them per epoch and model — a table, or JSON (`--json`) for scripts — so a change of
prompt (`THREADGATE_INSTRUCTIONS`) or of model can be judged by the people who read the
answers. Read only, from any machine that reaches the database.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from gateway.config.settings import Settings
from gateway.operator.task_commands import database, one_line, table
from storage import FeedbackLine, feedback_report

_COLUMNS = ("PROMPT EPOCH", "MODEL", "POSITIVE", "NEGATIVE", "RATIO")


def add_feedback_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "feedback", help="how people rated the replies, per prompt epoch and model"
    )
    report.add_argument("--json", action="store_true", help="JSON for scripts")
    report.set_defaults(command=feedback_command)


async def feedback_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        lines = await feedback_report(db)
    print(report_json(lines) if args.json else render_report(lines))
    return 0


def report_json(lines: Sequence[FeedbackLine]) -> str:
    """The report as a JSON list, one object per prompt epoch and model."""
    return json.dumps(
        [
            {
                "prompt_epoch": line.prompt_epoch,
                "provider": line.provider,
                "model": line.model,
                "positive": line.positive,
                "negative": line.negative,
                "ratio": round(line.ratio, 4),
            }
            for line in lines
        ],
        indent=2,
    )


def render_report(lines: Sequence[FeedbackLine]) -> str:
    """One line per prompt epoch and model under a header."""
    if not lines:
        return "No feedback yet: nobody has rated a reply."
    rows = [
        (
            (line.prompt_epoch or "unknown")[:12],
            one_line(f"{line.provider}:{line.model}" if line.provider else "unknown", 40),
            str(line.positive),
            str(line.negative),
            f"{line.ratio:.0%}",
        )
        for line in lines
    ]
    return table(_COLUMNS, rows)
