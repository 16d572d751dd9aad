"""`threadgate doctor`: every reason the gateway would not work, found in one run.

An operator fixing a deployment one error at a time — start, read the sentence, fix,
start again — loses an afternoon. The doctor runs every check, each bounded in time (a
few seconds, `Limits`; a word on stderr names the checks still waiting) and each
independent of the others, and reports each problem on a line of its own, in sentences
that name the setting to fix (gateway/operator/reports.py):

- settings: every variable the chosen mode requires that is missing or malformed, all at
  once, and the variables no setting reads (gateway/operator/settings_check.py);
- Slack: `auth.test` with the bot token, then the granted scopes (Slack reports them in
  the `x-oauth-scopes` header) against those `gateway.slack.scopes.bot_scopes` says the settings
  need, and this host's clock against the `Date` of Slack's answer (in HTTP mode a clock
  five minutes off makes every request look stale); with many workspaces (SLACK_CLIENT_ID), the client id and secret's shape, then
  every installation in the database — its team id and name, never its token — and an
  `auth.test` with each one's token;
- Socket Mode (with `SLACK_APP_TOKEN`): a connection opened until Slack says hello, then
  closed, so a refused or wrong-kind app token shows before `serve`;
- the model: one tiny call per configured slot (`agent.probe_model`);
- the database: reachable, and which migrations `serve` will apply at start (not a failure);
- erasure: a workspace the app was uninstalled from whose stored content is still there
  well after the uninstall (storage/erasure.py);
- models down: messages waiting because every model route was unavailable at their last
  try (storage/model_waits.py), how many and since when;
- retention: with many workspaces, messages kept longer than Slack's terms allow a
  distributed app (`DISTRIBUTED_RETENTION_DAYS`);
  then people's schedules: how many are active, waiting for approval or paused, and those
  that slip past today's bounds (never approved, too often, over a cap) as warnings;
- MCP servers (`THREADGATE_MCP_CONFIG`): each one connected or not (and why), with the
  tools it offers the model. A server that does not connect is a problem to report, even
  though `serve` would start without it;
- channels (`THREADGATE_CHANNEL_CONFIG`): the file's problem, or the effective policy of
  the default and of each configured channel, one line each — models, tools (and which
  built-in ones they offer), Slack Connect, instructions, limits.

A check whose input is missing or malformed is skipped (its cause is already reported as
a problem), and so is one the role (THREADGATE_ROLE) does not need: an ingress calls no
model and connects no MCP server, a worker opens no Socket Mode connection.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from slack_sdk.web.async_slack_response import AsyncSlackResponse

from agent import (
    ChannelPolicy,
    ConfigError,
    McpClients,
    McpServerState,
    Model,
    RouteConfig,
    ToolRegistry,
    default_registries,
    installed_providers,
    open_route,
    probe_model,
)
from gateway.config.channel_config import EMPTY, Effective
from gateway.config.connections import ConnectionPlan
from gateway.config.settings import Settings, database_dsn
from gateway.inbound.socket_mode import probe_socket_mode
from gateway.models.routes import provider_settings
from gateway.operator.reports import Finding, Status, network_words, watched
from gateway.operator.schedule_check import census as schedule_census
from gateway.operator.schedule_check import findings as schedule_findings
from gateway.operator.settings_check import (
    Given,
    check_settings,
    config_error,
    config_problems,
)
from gateway.process.channel_policies import prompt_instructions
from gateway.process.slack_clients import token_cipher
from gateway.process.workers import ERASURE_SWEEP_SECONDS
from gateway.slack.client import slack_client
from gateway.slack.errors import SlackError, SlackRefused, SlackUnavailable
from gateway.slack.oauth import OPEN_INSTALLS, InstallAllowlist
from gateway.slack.scopes import SCOPE_REASONS, bot_scopes, missing_scopes, parse_granted
from gateway.telemetry.rejections import MAX_AGE, clock_skew_from
from storage import (
    Database,
    InstallationSummary,
    PostgresInstallations,
    StorageError,
    database_place,
    pending_erasures,
    pending_migrations,
    waiting_for_models,
)

log = logging.getLogger(__name__)
# Past this, this host's clock is told apart from Slack's (a second of rounding, and the
# time the answer took, are always there).
CLOCK_TOLERANCE_SECONDS = 30


@dataclass(frozen=True, slots=True)
class Limits:
    """How long each check may take, in seconds."""

    # A few seconds each, longer than a healthy answer takes: Slack's auth.test and a
    # Socket Mode hello take under one, a database connection less, a model's one-word
    # answer a few (a reasoning model thinks first).
    slack: float = 5.0
    model: float = 10.0
    database: float = 5.0
    embedded_database: float = 120.0  # the first start of the embedded server runs initdb
    mcp: float = 30.0  # a server started with `npx` may download itself first

    @classmethod
    def uniform(cls, seconds: float) -> Limits:
        return cls(seconds, seconds, seconds, seconds, seconds)


async def diagnose(
    settings: Settings,
    limits: Limits | None = None,
    *,
    given: Given | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Finding]:
    """Run every check (the slow ones concurrently, `progress` told which are still running
    every few seconds) and return the findings in order."""
    limits, given = limits or Limits(), given or Given()
    checks: dict[str, tuple[str, Callable[[], Awaitable[list[Finding]]]]] = {
        "Slack": ("slack", lambda: check_slack(settings, limits.slack)),
        "Socket Mode": ("socket mode", lambda: check_socket_mode(settings, limits.slack)),
        "the model": ("model", lambda: check_models(settings, limits.model)),
        "the database": ("database", lambda: check_database(settings, limits)),
        "the MCP servers": ("mcp", lambda: check_mcp(settings, limits.mcp)),
    }
    slack, sockets, models, database, mcp = await watched(
        {label: _guarded(check, run, given) for label, (check, run) in checks.items()}, progress
    )
    # Erasures are read from the database only once it answered, lest a hung one be
    # waited for twice.
    erasures = (
        await _guarded("erasure", lambda: check_erasures(settings, limits), given)
        if database and all(finding.status in ("ok", "warn") for finding in database)
        else []
    )
    waiting = (
        await _guarded("models down", lambda: check_waiting(settings, limits), given)
        if database and all(finding.status in ("ok", "warn") for finding in database)
        else []
    )
    return [
        *check_settings(settings, given),
        check_retention(settings),
        check_bots(settings),
        *slack,
        *sockets,
        *models,
        *database,
        *erasures,
        *waiting,
        *mcp,
        *check_channels(settings),
        check_thread_queue(settings),
    ]


async def _guarded(
    check: str, run: Callable[[], Awaitable[list[Finding]]], given: Given
) -> list[Finding]:
    """Run a check, unless a setting it depends on is malformed (read as its default, it
    would check something the operator did not set). A check that crashes must not hide
    the others: its crash becomes its finding. Our own errors are sentences for the
    operator; anything else is said without its message (it may quote a secret, such as
    a DSN), and logged for THREADGATE_LOG_LEVEL=DEBUG."""
    blocking = given.blocking(check)
    if blocking:
        return [Finding(check, "skip", f"not checked: {blocking} is malformed (see settings)")]
    try:
        return await run()
    except (ConfigError, StorageError, SlackError) as exc:
        return [Finding(check, "FAIL", f"the check could not finish: {exc}")]
    except Exception:
        log.debug("the %s check failed", check, exc_info=True)
        detail = (
            "the check could not finish (an unexpected error: run `threadgate doctor` with "
            "THREADGATE_LOG_LEVEL=DEBUG to see it)"
        )
        return [Finding(check, "FAIL", detail)]


# -- settings -------------------------------------------------------------------------------


# The most days a distributed install (many workspaces) keeps messages without a warning.
# Slack's API terms name no number: they forbid persistent copies, archives and indexes of
# Slack data for apps used beyond their maker's organization. A month keeps a thread's
# context for as long as people usually come back to it, and is a cache, not an archive.
DISTRIBUTED_RETENTION_DAYS = 30


def check_retention(settings: Settings) -> Finding:
    """What the retention job will delete (storage/retention.py): a reminder, and a warning
    when a distributed install keeps messages longer than `DISTRIBUTED_RETENTION_DAYS`."""
    finding = retention_reminder(settings)
    days = settings.database.retention_days
    if settings.slack.oauth_mode and not 0 < days <= DISTRIBUTED_RETENTION_DAYS:
        kept = "forever" if not days else f"for {days} days"
        detail = (
            f"many workspaces (SLACK_CLIENT_ID) and messages kept {kept}: Slack's API terms "
            "forbid a distributed app persistent copies of Slack data; set "
            f"THREADGATE_RETENTION_DAYS to {DISTRIBUTED_RETENTION_DAYS} or fewer "
            "(README: What threadgate stores, and for how long)"
        )
        return Finding("retention", "warn", detail)
    return finding


def retention_reminder(settings: Settings) -> Finding:
    days = settings.database.retention_days
    every = f"every {settings.database.retention_interval_seconds:g} s"
    if not days:
        detail = (
            "conversations and finished tasks are kept forever (THREADGATE_RETENTION_DAYS "
            f"unset); delivery ids older than 24 h and expired limit counters are pruned {every}"
        )
    else:
        detail = (
            f"conversations and finished tasks older than {days} day(s) are deleted {every} "
            "(THREADGATE_RETENTION_DAYS); queued and running tasks and their threads are kept"
        )
    return Finding("retention", "ok", detail)


# -- Slack ----------------------------------------------------------------------------------


async def check_slack(settings: Settings, limit: float) -> list[Finding]:
    if settings.slack.oauth_mode:
        return [install_policy(settings), *await check_installations(settings, limit)]
    token = settings.slack.bot_token
    if token is None or not token.get_secret_value():
        return [Finding("slack", "skip", "not checked: SLACK_BOT_TOKEN is not set")]
    # The client's own bound past the check's: the check's is the one that answers.
    client = slack_client(token.get_secret_value(), settings.slack.api_url, timeout=2 * limit)
    try:
        async with asyncio.timeout(limit):
            response = await client.auth_test()
    except SlackRefused as refused:
        return [Finding("slack", "FAIL", slack_refusal(refused))]
    except SlackError as failure:
        return [Finding("slack", "FAIL", slack_failed(failure))]
    except TimeoutError:
        return [Finding("slack", "FAIL", unreachable_slack(f"no answer within {limit:g} s"))]
    scopes = check_scopes(
        response.headers,
        continue_threads=settings.access.continue_threads,
        workspace_search=settings.tools.workspace_search,
    )
    clock = check_clock(response.headers, time.time(), signed=not settings.slack.socket_mode)
    return [Finding("slack", "ok", identity(response)), *scopes, *clock]


async def check_socket_mode(settings: Settings, limit: float) -> list[Finding]:
    """With SLACK_APP_TOKEN set, open a Socket Mode connection, wait for Slack's hello,
    and close it again."""
    token = settings.slack.app_token
    if token is None or not token.get_secret_value():
        return []  # HTTP mode: nothing to check
    if not settings.process.serves_events:
        return [Finding("socket mode", "skip", "not checked: a worker takes no events")]
    if any("SLACK_APP_TOKEN" in str(problem) for problem in config_problems(settings)):
        detail = "not checked: SLACK_APP_TOKEN is not usable (see settings)"
        return [Finding("socket mode", "skip", detail)]
    try:
        async with asyncio.timeout(limit):
            count = await probe_socket_mode(
                app_token=token.get_secret_value(), api_url=settings.slack.api_url
            )
    except ConfigError as exc:
        return [Finding("socket mode", "FAIL", str(exc))]
    except SlackRefused as refused:
        detail = f"apps.connections.open failed ({refused.error}); check SLACK_APP_TOKEN."
        return [Finding("socket mode", "FAIL", detail)]
    except SlackError as failure:
        return [Finding("socket mode", "FAIL", unreachable_socket(why_failed(failure)))]
    except TimeoutError:
        return [Finding("socket mode", "FAIL", unreachable_socket(f"no hello within {limit:g} s"))]
    detail = f"SLACK_APP_TOKEN works: Slack said hello ({count} connection(s) open, this check's included)"
    return [Finding("socket mode", "ok", detail)]


def check_bots(settings: Settings) -> Finding:
    """Which bots are answered (THREADGATE_ALLOW_BOTS), with the loop guard's bound; a
    warning when the guard's alert would reach no operator channel."""
    access = settings.access
    policy, guard = access.bot_policy, access.loop_guard
    if policy.mode == "none":
        return Finding("bots", "ok", "no bot is answered (THREADGATE_ALLOW_BOTS=none)")
    detail = (
        f"answers {policy.describe()}, at most {guard.turns} bot turn(s) per thread per "
        f"{guard.window_seconds:g} s (THREADGATE_BOT_TURNS_PER_THREAD)"
    )
    if not settings.alerts.operator_channel:
        warning = "; a bot loop is only logged: set THREADGATE_OPERATOR_CHANNEL to be told"
        return Finding("bots", "warn", detail + warning)
    return Finding("bots", "ok", detail)


def install_policy(settings: Settings) -> Finding:
    """Who may install (OAuth mode): the allowlist, or a warning that anyone may."""
    allowed = settings.slack.install_allowlist
    if allowed:
        return Finding("install", "ok", f"only {', '.join(sorted(allowed))} may install")
    return Finding("install", "warn", OPEN_INSTALLS)


async def check_installations(settings: Settings, limit: float) -> list[Finding]:
    """Many workspaces: every installation named (no token) and its token tried."""
    if config_error(settings.require_oauth):
        return [Finding("slack", "skip", "not checked: the OAuth settings are not usable")]
    async with (
        asyncio.timeout(limit),
        Database(await database_dsn(settings), min_size=1, max_size=1) as db,
    ):
        installations = PostgresInstallations(
            db, settings.require("SLACK_CLIENT_ID"), cipher=token_cipher(settings)
        )
        try:
            found = await installations.installations()
        except StorageError as exc:
            detail = f"the installations could not be read ({exc}); see the database check"
            return [Finding("slack", "skip", detail)]
        if not found:
            detail = "no workspace has installed the app yet: open /slack/install on the gateway"
            return [Finding("slack", "ok", detail)]
        tried = [await _try_installation(settings, installations, s, limit) for s in found]
        return [
            *tried,
            *off_the_allowlist(settings, found),
            await token_sealing(installations, sealing=token_cipher(settings) is not None),
        ]


def off_the_allowlist(settings: Settings, found: list[InstallationSummary]) -> list[Finding]:
    """Installations THREADGATE_INSTALL_ALLOWLIST leaves out: their events are refused."""
    allowlist = InstallAllowlist(settings.slack.install_allowlist)
    return [
        Finding(
            "install",
            "warn",
            f"{summary.team_id or summary.enterprise_id} is installed but not on "
            "THREADGATE_INSTALL_ALLOWLIST: its events are refused; add it, or uninstall the app there",
        )
        for summary in found
        if not allowlist.allows_workspace(summary.team_id, summary.enterprise_id)
    ]


async def token_sealing(installations: PostgresInstallations, *, sealing: bool) -> Finding:
    """Whether the stored bot tokens are sealed (THREADGATE_TOKEN_KEY), and how many not."""
    try:
        left = await installations.unsealed()
    except StorageError as exc:
        return Finding("tokens", "skip", f"not counted ({exc}); see the database check")
    if not left:
        return Finding("tokens", "ok", "every stored bot token is sealed")
    if sealing:
        detail = f"{left} stored bot token(s) not sealed yet: `threadgate serve` seals them"
    else:
        detail = f"THREADGATE_TOKEN_KEY is unset: {left} bot token(s) stored as Slack issued them"
    return Finding("tokens", "warn", detail)


async def _try_installation(
    settings: Settings,
    installations: PostgresInstallations,
    summary: InstallationSummary,
    limit: float,
) -> Finding:
    where = summary.team_id or summary.enterprise_id
    named = f"workspace {where} ({summary.team_name or summary.enterprise_name})"
    try:
        found = await installations.find(
            summary.enterprise_id,
            summary.team_id,
            is_enterprise_install=summary.is_enterprise_install,
        )
    except StorageError as exc:  # a sealed token and no (or another) THREADGATE_TOKEN_KEY
        return Finding("slack", "FAIL", f"{named}: {exc}")
    if found is None:
        return Finding("slack", "skip", f"{named}: uninstalled while checked")
    client = slack_client(found.bot_token, settings.slack.api_url, timeout=2 * limit)
    try:
        response = await client.auth_test()
    except SlackRefused as refused:
        return Finding(
            "slack",
            "FAIL",
            f"{named}: Slack refused its bot token ({refused.error}); reinstall the app there.",
        )
    except SlackError as failure:
        return Finding("slack", "FAIL", slack_failed(failure))
    return Finding(
        "slack",
        "ok",
        f"{named}: its token works, bot @{response.get('user')} ({response.get('user_id')})",
    )


def unreachable_socket(why: str) -> str:
    return (
        f"the Socket Mode connection did not open ({why}); check SLACK_APP_TOKEN and that "
        "this host reaches Slack's WebSocket hosts."
    )


def slack_refusal(refused: SlackRefused) -> str:
    return (
        f"Slack refused SLACK_BOT_TOKEN ({refused.error}): put the bot token (xoxb-…) from "
        "your Slack app's OAuth & Permissions page there, reinstalling the app if it was "
        "revoked."
    )


def slack_failed(failure: SlackError) -> str:
    """A call that was not refused: Slack was not reached, or it failed on it."""
    if isinstance(failure, SlackUnavailable):
        return unreachable_slack(why_failed(failure))
    return (
        f"the Slack Web API failed on {failure.method} ({why_failed(failure)}); try again, "
        "or check SLACK_API_URL."
    )


def why_failed(failure: SlackError) -> str:
    """A Slack call's failure in words: the network's, Slack's error code, or an HTTP
    status; never the name of the exception that carried it."""
    words = network_words(failure)
    if words is not None:
        return words
    return "the connection failed" if _CLASS_NAME.fullmatch(failure.reason) else failure.reason


# What `SlackError.reason` holds when the transport failed: the exception's class name.
_CLASS_NAME = re.compile(r"(?:[A-Z][a-z0-9]+)+(?:Error|Exception|Timeout|Disconnected)")


def unreachable_slack(why: str) -> str:
    return f"the Slack Web API could not be reached ({why}); check SLACK_API_URL and the network."


def identity(response: AsyncSlackResponse) -> str:
    team, team_id = response.get("team"), response.get("team_id")
    bot, bot_id = response.get("user"), response.get("user_id")
    return f"SLACK_BOT_TOKEN works: workspace {team} ({team_id}), bot @{bot} ({bot_id})"


def check_scopes(
    headers: Mapping[str, str], *, continue_threads: bool, workspace_search: bool = False
) -> list[Finding]:
    """The granted scopes against those the settings need (workspace search's only while
    THREADGATE_WORKSPACE_SEARCH is on: each missing one is named with what it is for)."""
    header = next((v for k, v in headers.items() if k.lower() == "x-oauth-scopes"), None)
    if header is None:
        detail = "not checked: Slack did not report the granted scopes (no x-oauth-scopes header)"
        return [Finding("slack scopes", "skip", detail)]
    settings = {"continue_threads": continue_threads, "workspace_search": workspace_search}
    missing = missing_scopes(parse_granted(header), **settings)
    if not missing:
        required = len(bot_scopes(**settings))
        detail = f"all {required} required bot scopes are granted"
        return [Finding("slack scopes", "ok", detail)]
    return [Finding("slack scopes", "FAIL", missing_scope(scope)) for scope in missing]


def check_clock(headers: Mapping[str, str], now: float, *, signed: bool) -> list[Finding]:
    """This host's clock against Slack's (the `Date` of its answer): in HTTP mode (`signed`)
    a request whose timestamp is more than five minutes off is refused as stale, every one
    of them when the clock is (gateway/telemetry/rejections.py)."""
    date = next((v for k, v in headers.items() if k.lower() == "date"), None)
    skew = None if date is None else clock_skew_from(date, now)
    if skew is None:
        return []  # Slack always dates its answers; a proxy that drops it leaves nothing to say
    if abs(skew) < CLOCK_TOLERANCE_SECONDS:
        detail = f"this host's clock agrees with Slack's (within {CLOCK_TOLERANCE_SECONDS} s)"
        return [Finding("clock", "ok", detail)]
    way = "behind" if skew > 0 else "ahead of"
    detail = f"this host's clock is {abs(skew):.0f} s {way} Slack's"
    status: Status = "FAIL" if signed and abs(skew) > MAX_AGE else "warn"
    return [
        Finding(
            "clock",
            status,
            f"{detail}: Slack's signed requests more than {MAX_AGE} s off are refused as "
            "stale; fix the host's time synchronization (NTP).",
        )
    ]


def missing_scope(scope: str) -> str:
    return (
        f"{scope} is not granted; the bot needs it to {SCOPE_REASONS[scope]}. Add it "
        "under OAuth & Permissions (or apply `threadgate manifest`) and reinstall the app."
    )


# -- the model ------------------------------------------------------------------------------


async def check_models(settings: Settings, limit: float) -> list[Finding]:
    """One tiny call to each route of the fallback chain, all at once."""
    if not settings.process.runs_workers:
        return [Finding("model", "skip", "not checked: an ingress calls no model")]
    try:
        routes = settings.models.routes()
    except ConfigError as exc:
        return [Finding("model", "FAIL", str(exc))]
    if not routes:
        detail = "not checked: no model is set (THREADGATE_MODEL, or THREADGATE_ROUTES)"
        return [Finding("model", "skip", detail)]
    findings = await asyncio.gather(
        *(check_route(settings, n, route, limit) for n, route in enumerate(routes))
    )
    return list(findings)


async def check_route(settings: Settings, index: int, route: RouteConfig, limit: float) -> Finding:
    """One route on its own, so a bad fallback does not hide how the primary is doing."""
    variable = (
        "THREADGATE_ROUTES"
        if settings.models.chain.strip()
        else ("THREADGATE_MODEL" if index == 0 else "THREADGATE_FALLBACK_MODEL")
    )
    try:
        model = open_route(
            route,
            index=index,
            settings=provider_settings(settings),
            kinds=installed_providers(),
            variable=variable,
        )
    except ConfigError as exc:
        return Finding("model", "FAIL", str(exc))
    try:
        return await probe(model, limit, base_url_of(route, variable))
    finally:
        await model.aclose()


async def probe(model: Model, limit: float, base_url: str = "its base URL") -> Finding:
    try:
        async with asyncio.timeout(limit):
            result = await probe_model(model)
    except TimeoutError:
        detail = (
            f"{model.name}: no answer within {limit:g} s; check that a server answers at "
            f"{base_url}, or allow longer with `threadgate doctor --timeout`"
        )
        return Finding("model", "FAIL", detail)
    words = network_words(result.error) if result.error is not None else None
    if words is not None:
        detail = f"{model.name} could not be reached ({words}); check {base_url} and the network"
        return Finding("model", "FAIL", detail)
    return Finding("model", "ok" if result.ok else "FAIL", str(result))


def base_url_of(route: RouteConfig, variable: str) -> str:
    """Where the setting that sends `route` to its server is: the route's own baseUrl, or
    its vendor's variable."""
    if route.base_url is not None:
        return f"the baseUrl of its route in {variable}"
    return f"{route.provider.upper()}_BASE_URL" if route.provider in VENDOR_URLS else "its base URL"


# The vendors whose base URL has a variable of its own (gateway/config/model_settings.py).
VENDOR_URLS = ("openai", "anthropic")


# -- the database ---------------------------------------------------------------------------


async def check_database(settings: Settings, limits: Limits) -> list[Finding]:
    embedded = settings.database.url is None
    where = f"embedded PostgreSQL in {settings.database.data_dir}" if embedded else "DATABASE_URL"
    limit = limits.embedded_database if embedded else limits.database
    try:
        async with asyncio.timeout(limit):
            found = await _pending(settings)
    except StorageError as exc:
        return [Finding("database", "FAIL", str(exc))]
    except TimeoutError:
        if not embedded:
            assert settings.database.url is not None
            where = f"the {database_place(settings.database.url.get_secret_value())}"
        detail = f"{where}: no answer within {limit:g} s; check DATABASE_URL and the network."
        return [Finding("database", "FAIL", detail[:1].upper() + detail[1:])]
    pending, room, tiers = found
    connections = connections_finding(settings, room)
    reads = read_tier_finding(settings, tiers)
    if pending:
        # Not a failure: `serve` applies pending migrations before it takes any work.
        detail = (
            f"{where} is reachable; `threadgate serve` will apply {len(pending)} pending "
            f"migration(s) at start ({', '.join(pending)}), or apply them now with "
            "`threadgate migrate`"
        )
        return [Finding("database", "ok", detail), connections, reads]
    ready = f"{where} is reachable and the schema is up to date"
    return [
        Finding("database", "ok", ready),
        connections,
        reads,
        *await check_schedules(settings, limit),
    ]


async def check_erasures(settings: Settings, limits: Limits) -> list[Finding]:
    """Workspaces the app was uninstalled from whose stored content is still there past the
    delay and two of the workers' sweeps: erasure is failing, or no worker runs."""
    limit = limits.embedded_database if settings.database.url is None else limits.database
    try:
        async with (
            asyncio.timeout(limit),
            Database(await database_dsn(settings), min_size=1, max_size=1, signals=False) as db,
        ):
            pending = await pending_erasures(db)
    except (StorageError, TimeoutError):
        return []  # the database check says why
    due = timedelta(seconds=settings.database.erasure_delay_seconds + 2 * ERASURE_SWEEP_SECONDS)
    overdue = [p.workspace for p in pending if p.waited > due]
    if overdue:
        detail = (
            f"the content of {len(overdue)} uninstalled workspace(s) ({', '.join(overdue)}) "
            f"is not erased {due.total_seconds():g} s after the uninstall: check that a "
            "worker runs and its log ('erasure of an uninstalled workspace failed')"
        )
        return [Finding("erasure", "warn", detail)]
    if pending:
        return [Finding("erasure", "ok", f"{len(pending)} uninstalled workspace(s) being erased")]
    return [Finding("erasure", "ok", "no uninstalled workspace's content waits to be erased")]


async def check_waiting(settings: Settings, limits: Limits) -> list[Finding]:
    """Messages waiting for the models: the probe above says whether they answer now."""
    limit = limits.embedded_database if settings.database.url is None else limits.database
    try:
        async with (
            asyncio.timeout(limit),
            Database(await database_dsn(settings), min_size=1, max_size=1, signals=False) as db,
        ):
            count, age = await waiting_for_models(db)
    except (StorageError, TimeoutError):
        return []  # the database check says why
    if not count:
        return []
    detail = (
        f"{count} message(s) wait because every model route was unavailable at their last "
        f"try, the oldest for {age or 0:.0f} s; they are tried at once when a model answers "
        "(the model check above says whether one does now)"
    )
    return [Finding("models down", "warn", detail)]


async def check_schedules(settings: Settings, limit: float) -> list[Finding]:
    """People's schedules against today's bounds (gateway/operator/schedule_check.py)."""
    try:
        async with asyncio.timeout(limit):
            found = await schedule_census(settings)
    except (StorageError, TimeoutError) as exc:
        why = str(exc) or f"no answer within {limit:g} s"
        return [Finding("schedules", "warn", f"people's schedules could not be read: {why}")]
    return [Finding("schedules", status, detail) for status, detail in schedule_findings(found)]


@dataclass(frozen=True, slots=True)
class Room:
    """The server's connection slots: how many it takes, and how many are in use now."""

    max_connections: int
    reserved: int  # superuser_reserved_connections: not for us
    in_use: int


async def _pending(settings: Settings) -> tuple[list[str], Room, list[tuple[str, str, str]]]:
    async with (
        Database(await database_dsn(settings), min_size=1, max_size=1, signals=False) as db,
        db.pool.acquire() as conn,
    ):
        pending = [migration.name for migration in await pending_migrations(conn)]
        row = await conn.fetchrow(_ROOM)
        assert row is not None
        tiers = await conn.fetch(_TIERS) if await conn.fetchval(_HAS_TIERS) else []
        found = [(t["team"], t["tier"], t["evidence"]) for t in tiers]
        return pending, Room(row["max"], row["reserved"], row["in_use"]), found


# The read tier each workspace was found in (migration 025; none before it is applied).
_HAS_TIERS = "SELECT to_regclass('slack_read_tiers') IS NOT NULL"
_TIERS = "SELECT team, tier, evidence FROM slack_read_tiers ORDER BY team"


def read_tier_finding(settings: Settings, found: list[tuple[str, str, str]]) -> Finding:
    """How Slack's thread and channel reads are paced (gateway/slack/read_pacing.py): the
    tier set, or found per workspace; the limited tier is a warning, since the model then
    sees less of what people see unless the messages arrive as events."""
    setting = settings.slack.read_tier
    if setting != "auto":
        pace = "one read a minute per method, 15 messages" if setting == "limited" else "Tier 3"
        return Finding("slack read tier", "ok", f"{setting} ({pace}; THREADGATE_SLACK_READ_TIER)")
    limited = [f"{team} ({evidence})" for team, tier, evidence in found if tier == "limited"]
    if not limited:
        return Finding("slack read tier", "ok", "auto: no workspace found in the limited tier")
    detail = (
        f"auto: limited (one read a minute per method, 15 messages) in {', '.join(limited)}; "
        "keep THREADGATE_CONTINUE_THREADS on so that messages arrive as events"
    )
    return Finding("slack read tier", "warn", detail)


_ROOM = """
SELECT current_setting('max_connections')::int AS max,
       current_setting('superuser_reserved_connections')::int AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
           AS in_use
"""


def connections_finding(settings: Settings, room: Room) -> Finding:
    """Whether the server has room for this process's connections under load (docs/DEPLOY.md:
    Postgres connections), and for how many processes like it."""
    need, role = ConnectionPlan.of(settings).total, settings.process.role
    usable = room.max_connections - room.reserved
    free = usable - room.in_use
    detail = (
        f"a process of role {role} opens up to {need} (THREADGATE_DB_CONNECTIONS "
        f"{settings.database.connections}); the server takes {usable} "
        f"(max_connections {room.max_connections}, {room.reserved} reserved), "
        f"{room.in_use} in use now: room for {max(free, 0) // need} more such process(es)"
    )
    if free < need:
        advice = "; raise max_connections or lower THREADGATE_DB_CONNECTIONS"
        return Finding("database connections", "warn", detail + advice)
    return Finding("database connections", "ok", detail)


# -- MCP servers ----------------------------------------------------------------------------


async def check_mcp(settings: Settings, limit: float) -> list[Finding]:
    if settings.tools.mcp_file is None:
        return []  # MCP is optional: nothing configured, nothing to check
    if not settings.process.runs_workers:
        return [Finding("mcp", "skip", "not checked: an ingress connects no MCP server")]
    try:
        config = settings.tools.mcp_config()
    except ConfigError as exc:
        return [Finding("mcp", "FAIL", str(exc))]
    if not config.enabled:
        return [Finding("mcp", "skip", "THREADGATE_MCP_CONFIG names no enabled server")]
    clients = McpClients(config, ToolRegistry())
    clients.start()
    try:
        await clients.wait_settled(limit)
        return [mcp_finding(state, limit) for state in clients.states()]
    finally:
        await clients.aclose()


def mcp_finding(state: McpServerState, limit: float) -> Finding:
    check = f"mcp {state.name}"
    if not state.connected:
        why = _without_class_name(state.error) if state.error else f"no answer within {limit:g} s"
        return Finding(check, "FAIL", f"not connected over {state.transport} ({why})")
    tools = ", ".join(state.tools) if state.tools else "none (check allowedTools)"
    detail = f"connected over {state.transport}; tools: {tools}"
    if not state.skipped:
        return Finding(check, "ok", detail)
    skipped = "; ".join(f"{name}: {why}" for name, why in state.skipped)
    return Finding(check, "warn", f"{detail}; not offered: {skipped}")


def _without_class_name(error: str) -> str:
    """An MCP server's failure as the agent keeps it (`Type: message`), said without the type."""
    name, colon, message = error.partition(": ")
    if _CLASS_NAME.fullmatch(name):
        return message if colon and message else "the connection failed"
    return error


# -- channels -------------------------------------------------------------------------------


def check_channels(settings: Settings) -> list[Finding]:
    """The effective policy of the default and of each channel the file names."""
    if settings.access.channel_file is None:
        return []  # one policy everywhere: the deployment's, Slack Connect refused
    try:
        config = settings.access.channel_config()
    except ConfigError as exc:
        return [Finding("channels", "FAIL", str(exc))]
    builtin = default_registries()[0].names
    channels: list[str | None] = [None, *config.channels]
    return [
        Finding(
            f"channel {channel or 'default'}",
            "ok",
            describe_policy(config.effective(channel, settings.models.specs), builtin),
        )
        for channel in channels
    ]


def describe_policy(effective: Effective, builtin: tuple[str, ...]) -> str:
    """A channel's effective policy in one line, as `doctor` prints it."""
    if effective.models is None:
        models = "the deployment's models"
    else:
        models = " then ".join(effective.models) + ("" if len(effective.models) > 1 else " only")
    matching = ChannelPolicy(tools=effective.tools)  # the agent's own matching of names
    offered = [name for name in builtin if matching.offers(name)]
    tools = f"tools {', '.join(effective.tools)} (built-in offered: {', '.join(offered) or 'none'})"
    connect = "answered" if effective.external == "allow" else "refused"
    instructions = prompt_instructions(effective)
    told = f"instructions {_quoted(instructions)}" if instructions else "no instructions of its own"
    given = effective.limits.model_dump(by_alias=True, exclude_none=True)
    limits = ", ".join(f"{k} {v}" for k, v in given.items()) or "the deployment's"
    return f"{models}; {tools}; Slack Connect {connect}; {told}; limits {limits}"


def check_thread_queue(settings: Settings) -> Finding:
    """Each channel's thread queue mode (storage/thread_queue.py); a warning where `steer`
    can take nothing: it hands new messages to a round between its tool calls, and a
    channel offered no work tool makes none (it then answers as `collect` does)."""
    deployment = settings.tasks.thread_queue
    try:
        config = settings.access.channel_config() if settings.access.channel_file else EMPTY
    except ConfigError:
        config = EMPTY  # `check_channels` reports the file
    modes: dict[str, tuple[str, tuple[str, ...]]] = {}
    for channel in [None, *config.channels]:
        effective = config.effective(channel, settings.models.specs)
        modes[channel or "default"] = (effective.thread_queue or deployment, effective.tools)
    said = "; ".join(f"{channel} {mode}" for channel, (mode, _) in modes.items())
    idle = [channel for channel, (mode, tools) in modes.items() if mode == "steer" and not tools]
    if not idle:
        return Finding("thread queue", "ok", said)
    return Finding(
        "thread queue",
        "warn",
        f"{said}: {', '.join(idle)} steer(s) with no work tools offered, so a round never"
        " takes new messages (they are collected for the next task instead)",
    )


def _quoted(text: str, most: int = 80) -> str:
    flat = " ".join(text.split())
    shown = flat if len(flat) <= most else f"{flat[: most - 1]}…"
    return f'"{shown}" ({len(text):,} characters)'
