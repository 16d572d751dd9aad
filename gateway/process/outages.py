"""What a worker process does when every model route is down, and when one is back.

The outage tracker (agent/models/outage.py) knows, from the ladders' attempts, when every
route is unavailable and when any answers again, and logs both; `OutageWatch` acts on it:

- every replica is told through Postgres (storage/model_waits.py): an outage this process
  saw is announced, so another replica's model answering first announces the end; an end
  this process saw makes every task waiting for the models runnable now, on every replica
  (their workers are woken by the same NOTIFY), and what other replicas announce reaches
  this process's tracker (`Database.on_models`);
- the route gauge (`threadgate_model_route_up`) follows each route's last attempt;
- with `THREADGATE_MODELS_DOWN_ALERT` on, the operator channel hears that the outage began
  and that it ended (`OperatorAlerts.notice`, each once per alert window for the whole
  deployment, like every alert). Only the replica that saw a change alerts.

The tracker tells its listeners synchronously, from inside a model attempt: the database
and Slack are reached in background tasks on the process's supervisor, so no answer waits
behind an alert.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from agent import (
    Outage,
    OutageTracker,
    Recovery,
    RouteState,
    Supervisor,
    describe_recovery,
)
from gateway.delivery.alerts import OperatorAlerts
from gateway.telemetry.metrics import Metrics
from storage import Database, StorageError, announce_models_down, wake_waiting_for_models

log = logging.getLogger(__name__)

# The operator alerts' keys: each throttled on its own (THREADGATE_ALERT_WINDOW_SECONDS).
DOWN_KEY = "models-down"
UP_KEY = "models-up"


class OutageWatch:
    """An `agent.OutageListener` that tells the replicas, wakes the waiting tasks, keeps
    the route gauge and (opt-in) alerts the operators."""

    def __init__(
        self,
        db: Database,
        supervisor: Supervisor,
        metrics: Metrics,
        alerts: OperatorAlerts | None,
    ) -> None:
        self._db = db
        self._supervisor = supervisor
        self._metrics = metrics
        self._alerts = alerts

    def route_changed(self, state: RouteState) -> None:
        self._metrics.route_changed(state.route, state.up)

    def outage_began(self, outage: Outage) -> None:
        if outage.heard:  # another replica saw it, and said so
            return
        self._spawn("models-down", announce_models_down(self._db))
        if self._alerts is not None:
            self._spawn("models-down-alert", self._alert(DOWN_KEY, down_text(outage)))

    def outage_ended(self, recovery: Recovery) -> None:
        if recovery.answered is None:  # another replica's model answered, and it said so
            return
        self._spawn("models-up", self._wake())
        if self._alerts is not None:
            self._spawn("models-up-alert", self._alert(UP_KEY, up_text(recovery)))

    async def _wake(self) -> None:
        woken = await wake_waiting_for_models(self._db)
        log.info("%d task(s) waiting for the models are tried now", woken)

    async def _alert(self, key: str, text: str) -> None:
        assert self._alerts is not None
        level = logging.WARNING if key == DOWN_KEY else logging.INFO
        await self._alerts.notice(key, text, level=level)

    def _spawn(self, name: str, work: Awaitable[None]) -> None:
        self._supervisor.spawn(_quietly(name, work), name=name)


async def _quietly(name: str, work: Awaitable[None]) -> None:
    """The database away is one line, not a traceback: the next change tries again, and
    every waiting task still has its own backed-off try."""
    try:
        await work
    except StorageError as exc:
        log.warning("%s: %s", name, exc)


def watch_outages(
    tracker: OutageTracker,
    db: Database,
    supervisor: Supervisor,
    metrics: Metrics,
    alerts: OperatorAlerts | None,
) -> OutageWatch:
    """The watch, listening to `tracker`, and `tracker` hearing the other replicas."""
    watch = OutageWatch(db, supervisor, metrics, alerts)
    tracker.subscribe(watch)
    db.on_models = lambda down: tracker.heard(down=down)
    return watch


def down_text(outage: Outage) -> str:
    """The operator alert of an outage's start: what failed, and what people see."""
    return (
        ":warning: *Every model route is unavailable.* Messages wait and are tried again "
        "(each thread is told once that the models are failing); they are answered as soon "
        f"as a model answers again. Last failures: {outage.describe()}"
    )


def up_text(recovery: Recovery) -> str:
    """The operator alert of an outage's end."""
    text = describe_recovery(recovery)
    return f":white_check_mark: {text[0].upper()}{text[1:]}; the waiting messages are tried now."
