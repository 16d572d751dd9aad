"""Prometheus metrics, in a registry of the process's own (never the global one, so two
gateways in one test process do not collide)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.events = Counter(
            "threadgate_events_total",
            "Slack event deliveries by outcome (admitted, duplicate, ignored, rejected).",
            ["outcome"],
            registry=r,
        )
        self.ack_seconds = Histogram(
            "threadgate_ack_seconds",
            "From request received to ack sent, admission included.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
