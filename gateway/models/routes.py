"""The model routes a process opens: settings become the agent's models and their ladder.

Why a module: the deployment's fallback chain (THREADGATE_MODEL / _FALLBACK_MODEL or
THREADGATE_ROUTES), each channel's own models (THREADGATE_CHANNEL_CONFIG) and `doctor`'s
one tiny call all open routes the same way: the same provider settings and transport, the
same metering, the same retry policy. Only a process that runs workers opens any; an
ingress calls no model.
"""

from __future__ import annotations

import functools
import hashlib

from agent import (
    NO_TRACER,
    AttemptLadder,
    CircuitBreaker,
    Model,
    OutageTracker,
    ProviderSettings,
    RetryPolicy,
    Task,
    Tracer,
    installed_providers,
    open_route,
    route_capabilities,
)
from gateway.config.settings import Settings
from gateway.models.transport import model_transport
from gateway.slack.address import SlackAddress
from gateway.telemetry.metrics import MeteredModel, Metrics


def provider_settings(settings: Settings) -> ProviderSettings:
    return ProviderSettings(
        openai_api_key=settings.models.openai_api_key,
        openai_base_url=settings.models.openai_base_url,
        anthropic_api_key=settings.models.anthropic_api_key,
        anthropic_base_url=settings.models.anthropic_base_url,
        gateway_header=settings.models.gateway_header,
        gateway_token=settings.models.gateway_token,
        timeout=settings.models.timeout_seconds,
        transport=functools.partial(model_transport, workers=settings.tasks.workers),
        sampling=settings.models.sampling,
    )


def open_models(settings: Settings) -> list[Model]:
    """The fallback chain's models, one per route in order; a bad route or a missing key
    is a ConfigError naming the setting."""
    providers = provider_settings(settings)
    variable = _routes_variable(settings)
    return [
        open_route(
            route, index=n, settings=providers, kinds=installed_providers(), variable=variable
        )
        for n, route in enumerate(settings.require_routes())
    ]


def metered_models(settings: Settings, metrics: Metrics, tracer: Tracer = NO_TRACER) -> list[Model]:
    """The deployment's fallback chain, each request counted, priced and traced."""
    prices = settings.models.price_table()
    return [
        MeteredModel(m, metrics, n, prices=prices, tracer=tracer)
        for n, m in enumerate(open_models(settings))
    ]


def channel_ladder(
    settings: Settings,
    specs: tuple[str, ...],
    *,
    metrics: Metrics,
    circuit: CircuitBreaker,
    tracer: Tracer = NO_TRACER,
    outage: OutageTracker | None = None,
) -> tuple[AttemptLadder, list[Model]]:
    """A channel's own models (THREADGATE_CHANNEL_CONFIG) as a ladder sharing the
    deployment's `circuit` and `outage` tracker, and the models to close with the process."""
    variable = "THREADGATE_CHANNEL_CONFIG"
    providers, prices = provider_settings(settings), settings.models.price_table()
    models: list[Model] = [
        MeteredModel(
            open_route(
                settings.models.route_for(spec, variable=variable),
                index=n,
                settings=providers,
                kinds=installed_providers(),
                variable=variable,
            ),
            metrics,
            n,
            prices=prices,
            tracer=tracer,
        )
        for n, spec in enumerate(specs)
    ]
    ladder = AttemptLadder(
        models,
        policy=retry_policy(settings),
        circuit=circuit,
        on_attempt=metrics.on_attempt,
        outage=outage,
    )
    return ladder, models


def reads_documents(settings: Settings) -> bool:
    """Whether some route reads PDFs natively (agent/models/capabilities.py): only then
    are PDFs themselves kept with their turns; every model reads their text anyway."""
    providers = provider_settings(settings)
    return any(
        route_capabilities(route, settings=providers, kinds=installed_providers()).documents
        for route in settings.models.routes(keys=False)
    )


def _routes_variable(settings: Settings) -> str:
    return "THREADGATE_ROUTES" if settings.models.chain.strip() else "THREADGATE_MODEL"


def retry_policy(settings: Settings) -> RetryPolicy:
    return RetryPolicy(
        attempts_per_slot=settings.models.attempts,
        base_delay=settings.models.retry_seconds,
    )


def end_user_of(task: Task) -> str | None:
    """The id the providers are given for the person a task answers (THREADGATE_SEND_USER_ID):
    a hash of their workspace and Slack user id, never the id itself. The vendors ask for
    an opaque, stable id so their abuse detection can tell one person's requests from the
    rest of the deployment's; a Slack id would tell them who the person is in which
    workspace (and `users.info` turns it into a name and an email). The hash is salted with
    the workspace, so the same person has unrelated ids in two workspaces; it is not a
    secret (anyone holding a Slack id can compute it), only unreadable."""
    address = SlackAddress.parse(task.address)
    if address.user is None:
        return None
    team = address.user_team or address.team or ""
    digest = hashlib.sha256(f"threadgate-end-user:{team}:{address.user}".encode()).hexdigest()
    return f"tg-{digest[:32]}"
