"""The gateway's Prometheus families, declared in groups by concern.

`Metrics` (metrics.py) is every group at once, so the rest of the gateway takes one object
and reads `metrics.events` or calls `metrics.task_settled(...)`. Each group declares its
families in the registry it is given and holds the verbs that count into them, so a
concern's names, help texts and callers read together on one short page.
`tests/gateway/test_metric_families.py` holds the list of families dashboards rely on.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent import Route
from storage import LIMIT_SCOPES, ConnectionPool

# How a schedule's period can end (`threadgate_schedule_runs_total`).
SCHEDULE_OUTCOMES = ("posted", "silent", "failed", "skipped", "limited", "paused", "unverified")
# What became of a person's schedule asked for by a conversation, and of clicks on it.
SCHEDULE_DECISIONS = ("approved", "denied", "timed_out", "refused", "already", "unknown")
# What became of a press of the message shortcut and of its modal's submission.
SHORTCUT_OUTCOMES = {
    "press": ("opened", "refused", "duplicate", "expired", "failed"),
    "submit": ("admitted", "in_dm", "duplicate", "limited", "refused", "ignored"),
}
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class EventFamilies:
    """Slack's deliveries: what became of each, and how fast it was acked."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.events = Counter(
            "threadgate_events_total",
            "Slack event deliveries by outcome (admitted, duplicate, ignored, limited, refused, rejected, unauthorized; edited, deleted for edits and deletions; not_allowed: a workspace off THREADGATE_INSTALL_ALLOWLIST).",
            ["outcome"],
            registry=registry,
        )
        self.ack_seconds = Histogram(
            "threadgate_ack_seconds",
            "From request received to ack sent, admission included.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )
        self.channel_reloads = Counter(
            "threadgate_channel_config_reloads_total",
            "SIGHUP reloads of THREADGATE_CHANNEL_CONFIG by outcome: reloaded, or failed (the"
            " policy in force kept, the operators alerted).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("reloaded", "failed"):
            self.channel_reloads.labels(outcome)
        self.loop_lag = Histogram(
            "threadgate_event_loop_lag_seconds",
            "How late a quarter-second timer woke on each event loop of the process (`loop`:"
            " ingress, workers, or all when one loop runs both): how long ready work waited"
            " its turn (gateway/telemetry/loop_lag.py).",
            ["loop"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )


class MessageFamilies:
    """What the gatekeeper made of what people (and bots) sent: limits, bots' turns, pasted
    credentials, attached files, pins."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.limited = Counter(
            "threadgate_limited_messages_total",
            "Messages acked but not answered because a limit refused them, by the limit"
            " (user, thread, user_tokens, channel_tokens, all_tokens, channel_spend,"
            " workspace_spend), or their channel was refused (external: shared with another"
            " organization; unverified: its sharing could not be checked).",
            ["scope"],
            registry=registry,
        )
        for scope in LIMIT_SCOPES:  # every limit shows, at 0 until it first refuses
            self.limited.labels(scope)
        self.attached_files = Counter(
            "threadgate_attached_files_total",
            "Files attached to messages, by kind (image, text, pdf, other) and outcome (read,"
            " or why not: type_not_allowed, too_large, download_failed, not_downloaded_in_time…).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.pins = Counter(
            "threadgate_pins_total",
            "Pin events by outcome: pinned, retained (a message we never stored, kept for its"
            " pin), unpinned, ignored (not a message of a conversation we keep), failed.",
            ["outcome"],
            registry=registry,
        )
        self.bot_turns = Counter(
            "threadgate_bot_turns_total",
            "Bots' mentions of ours by outcome: answered, not_allowed (THREADGATE_ALLOW_BOTS),"
            " own (our own bot), looping (past THREADGATE_BOT_TURNS_PER_THREAD in its thread).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("answered", "not_allowed", "own", "looping"):
            self.bot_turns.labels(outcome)
        self.listed_pins = Counter(
            "threadgate_pins_listed_total",
            "Pins a newer pin moved out of the model's full view: listed to it by author and"
            " first words from then on (the person who pinned is told which).",
            registry=registry,
        )
        self.secrets_redacted = Counter(
            "threadgate_secrets_redacted_total",
            "Credentials taken out of what people wrote (messages, edits, back-filled"
            " messages, file text) before it was stored or shown to a model, by kind.",
            ["kind"],
            registry=registry,
        )

        self.shortcuts = Counter(
            "threadgate_shortcuts_total",
            'The "Ask threadgate about this message" shortcut, by step and outcome: press'
            " (opened, refused: not allowed there, duplicate: its trigger already used,"
            " expired: opened too late, failed) and submit (admitted, in_dm: admitted, answered"
            " in the person's DM, duplicate, limited, refused, ignored).",
            ["step", "outcome"],
            registry=registry,
        )
        for step, outcomes in SHORTCUT_OUTCOMES.items():
            for outcome in outcomes:
                self.shortcuts.labels(step, outcome)

    def message_limited(self, scope: str) -> None:
        self.limited.labels(scope).inc()

    def shortcut(self, step: str, outcome: str) -> None:
        self.shortcuts.labels(step, outcome).inc()

    def bot_turn(self, outcome: str) -> None:
        self.bot_turns.labels(outcome).inc()

    def file_read(self, kind: str, outcome: str) -> None:
        self.attached_files.labels(kind, outcome).inc()

    def pin_settled(self, outcome: str) -> None:
        self.pins.labels(outcome).inc()

    def pins_listed(self, count: int) -> None:
        self.listed_pins.inc(count)

    def redacted(self, kinds: Mapping[str, int]) -> None:
        """What one admission or edit took out, by kind (every kind of
        gateway/text/secrets.py shows, at 0, once `show_kinds` named them)."""
        for kind, count in kinds.items():
            self.secrets_redacted.labels(kind).inc(count)

    def show_kinds(self, kinds: Iterable[str]) -> None:
        for kind in kinds:
            self.secrets_redacted.labels(kind)


class ModelFamilies:
    """Model requests: attempts, latency, tokens and cost (fed by `MeteredModel`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.model_calls = Counter(
            "threadgate_model_attempts_total",
            "Attempts on a model slot, by outcome (ok, transient, failed, credential, quota, circuit_open).",
            ["slot", "model", "outcome"],
            registry=registry,
        )
        self.model_seconds = Histogram(
            "threadgate_model_request_seconds",
            "Latency of one model request.",
            ["slot", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter(
            "threadgate_model_tokens_total",
            "Tokens by kind.",
            ["slot", "model", "kind"],
            registry=registry,
        )
        self.cost = Counter(
            "threadgate_model_cost_usd_total",
            "What the model answers cost, in USD by the price table (THREADGATE_PRICES over"
            " the built-in one), by model; answers of a model it has no price for are counted"
            " in threadgate_model_unpriced_answers_total instead.",
            ["model"],
            registry=registry,
        )
        self.unpriced = Counter(
            "threadgate_model_unpriced_answers_total",
            "Model answers the price table has no price for (their cost is unknown), by model.",
            ["model"],
            registry=registry,
        )

        self.route_up = Gauge(
            "threadgate_model_route_up",
            "1 while a model route's last attempt was answered, 0 while it failed (by"
            " provider:model; a route shows once it was first tried). Every route at 0: every"
            " model is down, and tasks wait for one to answer again.",
            ["model"],
            registry=registry,
        )

    def on_attempt(self, route: Route, outcome: str) -> None:
        self.model_calls.labels(str(route.slot), f"{route.provider}:{route.model}", outcome).inc()

    def route_changed(self, route: Route, up: bool) -> None:
        """The outage tracker's view of a route changed (agent/models/outage.py)."""
        self.route_up.labels(f"{route.provider}:{route.model}").set(1 if up else 0)


class SlackFamilies:
    """Calls to Slack's Web API, the messages we streamed, workspace searches, and clicks
    on our buttons."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.slack_calls = Counter(
            "threadgate_slack_api_calls_total",
            "Slack Web API calls by method and status (ok or Slack's error code).",
            ["method", "status"],
            registry=registry,
        )
        self.streams = Counter(
            "threadgate_streamed_messages_total",
            "Streamed messages by kind (reply, plan) and how they ended: completed (stopped"
            " as streamed), replaced (completed by chat.update: the text differed, or a"
            " stream a crashed process left), taken_back (a draft that was not the reply),"
            " refused (Slack would not stream; posted whole).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.feedback = Counter(
            "threadgate_feedback_total",
            "Votes cast or changed on replies with Slack's feedback buttons, by value"
            " (positive, negative); a repeated click is not counted.",
            ["value"],
            registry=registry,
        )
        self.workspace_searches = Counter(
            "threadgate_workspace_searches_total",
            "Workspace searches (search_workspace, Slack's Real-time Search) by outcome: ok;"
            " no_action_token (the task has no person's permission: a schedule's run);"
            " shared_conversation (not searched from a Slack Connect conversation);"
            " unanswered; or Slack's error code (missing_scope, invalid_action_token,"
            " not_allowed_token_type, ratelimited, …).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("ok", "no_action_token"):  # both show, at 0 until the first
            self.workspace_searches.labels(outcome)
        self.approvals = Counter(
            "threadgate_approval_clicks_total",
            "Clicks on approval requests, by outcome (approved, denied; refused: not the"
            " asker nor an approver; already: decided before; ended, unknown).",
            ["outcome"],
            registry=registry,
        )
        self.slack_reads = Counter(
            "threadgate_slack_reads_total",
            "Paced Slack reads (conversations.replies, conversations.history) by method and"
            " outcome: read (a page came back), deferred (its turn in the workspace's shared"
            " budget was past the caller's deadline: not called), rate_limited (Slack said"
            " ratelimited: the budget waits its Retry-After), failed.",
            ["method", "outcome"],
            registry=registry,
        )
        self.slack_read_tier = Gauge(
            "threadgate_slack_read_tier",
            "1 for the read tier each workspace reads in (internal: Tier 3; limited: one"
            " read a minute per method, 15 messages a page), as THREADGATE_SLACK_READ_TIER"
            " sets it or as it was found.",
            ["workspace", "tier"],
            registry=registry,
        )
        self.cited_passages = Counter(
            "threadgate_cited_passages_total",
            "Passages of people's documents cited under replies, by what backs the quoted"
            " text: provider (the text the provider cited), found or not_found (a quote the"
            " model wrote, on the page it cites or not), unknown (that page's text was not"
            " read), none (no quote).",
            ["quote"],
            registry=registry,
        )

    def stream_ended(self, kind: str, outcome: str) -> None:
        self.streams.labels(kind, outcome).inc()

    def slack_read(self, method: str, outcome: str) -> None:
        self.slack_reads.labels(method, outcome).inc()

    def read_tier_found(self, workspace: str, tier: str) -> None:
        for each in ("internal", "limited"):
            self.slack_read_tier.labels(workspace, each).set(1 if each == tier else 0)

    def searched(self, outcome: str) -> None:
        self.workspace_searches.labels(outcome).inc()

    def passage_cited(self, quote: str) -> None:
        self.cited_passages.labels(quote).inc()


class SurfaceFamilies:
    """The app's surfaces besides messages: the slash command and the App Home."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.slash_commands = Counter(
            "threadgate_slash_commands_total",
            "Slash commands by subcommand (help, status, stop, new, usage, schedules,"
            " schedules_delete, unknown) and outcome: answered; again (a redelivery: nothing"
            " done twice); busy (new while a task works); refused (allowlists, Slack"
            " Connect); limited (the hourly message limit); failed (the database).",
            ["subcommand", "outcome"],
            registry=registry,
        )
        self.home_views = Counter(
            "threadgate_home_views_total",
            "App Home views published (views.publish) by reason (opened, changed, clicked)"
            " and outcome: ok, or Slack's error code (not_enabled: the app's Home tab is off).",
            ["reason", "outcome"],
            registry=registry,
        )


class TaskFamilies:
    """How the agent's work ended: tasks, rounds, subtasks, tool calls, compactions and
    schedules' periods (the verbs are `agent.RunnerObserver`'s, and `compacted`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tasks = Counter(
            "threadgate_tasks_total",
            "Tasks settled, by outcome (request_cap: stopped by the cap on model requests;"
            " stopped: someone pressed Stop in the thread; interrupted: its asker wrote"
            " again, and it is answered with everything pending).",
            ["outcome"],
            registry=registry,
        )
        self.rounds = Counter(
            "threadgate_rounds_total", "Rounds run, by decision.", ["decision"], registry=registry
        )
        self.subtasks = Counter(
            "threadgate_subtasks_total", "Subtasks ended, by state.", ["state"], registry=registry
        )
        self.tool_calls = Counter(
            "threadgate_tool_calls_total",
            "Work-tool calls ended, by MCP server (builtin: threadgate's own and plugins'),"
            " tool and outcome (ok, error).",
            ["server", "tool", "outcome"],
            registry=registry,
        )
        self.tool_progress = Counter(
            "threadgate_tool_progress_total",
            "Progress reports of running work-tool calls (an MCP server's progress"
            " notifications), by MCP server and tool: each one updates the call's card.",
            ["server", "tool"],
            registry=registry,
        )
        self.compactions = Counter(
            "threadgate_compactions_total",
            "Summaries of what outgrew a thread's window, by outcome: summarized, failed"
            " (the older turns were dropped instead, as without compaction).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("summarized", "failed"):  # both show, at 0 until the first
            self.compactions.labels(outcome)
        self.reply_messages = Histogram(
            "threadgate_reply_messages",
            "Messages one posted reply answered: its own and those its task covered"
            " (THREADGATE_THREAD_QUEUE collect, steer, interrupt; 1 under followup).",
            buckets=(1, 2, 3, 5, 10, 20),
            registry=registry,
        )
        self.schedules_refused = Counter(
            "threadgate_schedules_refused_total",
            "schedule_create calls refused by a cap: person (THREADGATE_SCHEDULES_PER_PERSON)"
            " or channel (THREADGATE_SCHEDULES_PER_CHANNEL).",
            ["cap"],
            registry=registry,
        )
        self._schedule_families(registry)

    def _schedule_families(self, registry: CollectorRegistry) -> None:
        """Schedules' periods and the clicks on a schedule's approval."""
        self.schedule_runs = Counter(
            "threadgate_schedule_runs_total",
            "Periods of schedules, by outcome: posted, silent (no_reply), failed; skipped"
            " (missed while down, skip); limited (a limit or budget refused it); paused"
            " (its channel or workspace is gone, its channel became Slack Connect against"
            " its policy, or its owner left); unverified (the check before the run could not"
            " be made: looked at again, counted each time).",
            ["outcome"],
            registry=registry,
        )
        for outcome in SCHEDULE_OUTCOMES:
            self.schedule_runs.labels(outcome)
        self.schedule_approvals = Counter(
            "threadgate_schedule_approvals_total",
            "Clicks on the Approve and Deny of a schedule a conversation asked for, by"
            " outcome: approved, denied, timed_out (clicked past its deadline: denied);"
            " refused (someone not its owner clicked), already (decided before), unknown.",
            ["outcome"],
            registry=registry,
        )
        for outcome in SCHEDULE_DECISIONS:
            self.schedule_approvals.labels(outcome)

    def task_settled(self, outcome: str) -> None:
        self.tasks.labels(outcome).inc()

    def reply_answered(self, messages: int) -> None:
        self.reply_messages.observe(messages)

    def round_decided(self, decision: str) -> None:
        self.rounds.labels(decision).inc()

    def subtask_settled(self, state: str) -> None:
        self.subtasks.labels(state).inc()

    def compacted(self, outcome: str) -> None:
        self.compactions.labels(outcome).inc()

    def schedule_run_settled(self, outcome: str) -> None:
        self.schedule_runs.labels(outcome).inc()

    def schedule_decided(self, outcome: str) -> None:
        self.schedule_approvals.labels(outcome).inc()

    def schedule_refused(self, cap: str) -> None:
        self.schedules_refused.labels(cap).inc()


class QueueFamilies:
    """What is waiting and what today cost: the gauges the queue sampler keeps fresh
    (`sample_queue` in gateway/process/service.py)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.queue_depth = Gauge(
            "threadgate_queue_depth",
            "Unfinished tasks (queued, running or waiting).",
            registry=registry,
        )
        self.oldest_task_seconds = Gauge(
            "threadgate_oldest_task_age_seconds",
            "Age of the oldest unfinished task.",
            registry=registry,
        )
        self.tokens_today = Gauge(
            "threadgate_tokens_today",
            "Tokens every replica used today (UTC), as stored for the daily budgets, by direction.",
            ["direction"],
            registry=registry,
        )


class DatabaseFamilies:
    """The connection pool, and the rows retention and erasure deleted."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.db_pool_wait_seconds = Histogram(
            "threadgate_db_pool_wait_seconds",
            "How long a statement waited for a database connection because every one of the"
            " pool's was lent out (a free connection is taken without waiting: not counted).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=registry,
        )
        self.db_pool_connections = Gauge(
            "threadgate_db_pool_connections",
            "This process's database connections: lent (running a statement or a"
            " transaction now), open (open, being opened or being closed), max (the pool's"
            " size; every replica's max counts against the server's max_connections).",
            ["state"],
            registry=registry,
        )
        self.db_pool_waiting = Gauge(
            "threadgate_db_pool_waiting",
            "Statements waiting for a database connection now.",
            registry=registry,
        )
        self.retention_deleted = Counter(
            "threadgate_retention_deleted_total",
            "Rows the retention job deleted, by table (storage/retention.py).",
            ["table"],
            registry=registry,
        )

        self.erased = Counter(
            "threadgate_erased_rows_total",
            "Rows deleted because the app was uninstalled from their workspace, by table"
            " (storage/erasure.py).",
            ["table"],
            registry=registry,
        )
        self.erasures_pending = Gauge(
            "threadgate_erasures_pending",
            "Workspaces the app was uninstalled from whose stored content is not erased yet,"
            " as the workers' last sweep found (one stays up for THREADGATE_ERASURE_DELAY_SECONDS"
            " after an uninstall; longer means erasure fails: see the log).",
            registry=registry,
        )

    def watch_pool(self, pool: ConnectionPool) -> None:
        """The pool gauges read `pool` when scraped."""
        self.db_pool_connections.labels("lent").set_function(lambda: pool.lent)
        self.db_pool_connections.labels("open").set_function(lambda: pool.size)
        self.db_pool_connections.labels("max").set_function(lambda: pool.max_size)
        self.db_pool_waiting.set_function(lambda: pool.waiting)

    def retention_deleted_rows(self, table: str, count: int) -> None:
        """`storage.Retention`'s counter callback."""
        self.retention_deleted.labels(table).inc(count)

    def erased_rows(self, table: str, count: int) -> None:
        """`storage.Erasure`'s counter callback."""
        self.erased.labels(table).inc(count)


class ConnectionFamilies:
    """What this process runs and what it is connected to: its build, its Socket Mode
    connection to Slack, its MCP servers. The gauges read the connections when scraped
    (`watch_socket_mode`, `watch_mcp`): the agent's MCP clients know nothing of
    Prometheus, they are only asked."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.build_info = Gauge(
            "threadgate_build_info",
            "Always 1, labelled with the threadgate version this process runs and its"
            " Python version: which replicas run which release.",
            ["version", "python"],
            registry=registry,
        )
        self.build_info.labels(_version(), platform.python_version()).set(1)
        self.socket_mode_connected = Gauge(
            "threadgate_socket_mode_connected",
            "1 while this process's Socket Mode connection of the Slack app (`app`: its id,"
            " as Slack's hello says) is up — it said hello, is open and answers pings — and"
            " 0 while it is down or reconnecting (no series in HTTP mode).",
            ["app"],
            registry=registry,
        )
        self.mcp_server_up = Gauge(
            "threadgate_mcp_server_up",
            "1 while the MCP server (`server`, as THREADGATE_MCP_CONFIG names it) is"
            " connected and its tools are offered, 0 while it is not (connecting, or"
            " failed: the log says why); one series per enabled server, in processes that"
            " run the task workers.",
            ["server"],
            registry=registry,
        )

    def watch_socket_mode(self, app: str, up: Callable[[], bool]) -> None:
        """`threadgate_socket_mode_connected{app}` reads `up` when scraped."""
        self.socket_mode_connected.labels(app).set_function(_as_number(up))

    def watch_mcp(self, servers: Mapping[str, Callable[[], bool]]) -> None:
        """`threadgate_mcp_server_up{server}` reads each server's `connected` when scraped."""
        for server, connected in servers.items():
            self.mcp_server_up.labels(server).set_function(_as_number(connected))


def _as_number(state: Callable[[], bool]) -> Callable[[], float]:
    return lambda: 1.0 if state() else 0.0


def _version() -> str:
    """The installed threadgate's version ("unknown" when run from a bare checkout)."""
    try:
        return importlib.metadata.version("threadgate")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
