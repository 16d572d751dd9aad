"""The Prometheus families a fresh `Metrics` exposes: names, types and label names.

Dashboards and alerts name these; a family renamed, dropped, retyped or relabelled in a
refactor fails here (the list is written out by hand, not read from the code).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from gateway.telemetry.metrics import Metrics

# (family as exposed, type, label names); a counter's family drops its `_total`.
FAMILIES = [
    ("threadgate_ack_seconds", "histogram", ()),
    ("threadgate_approval_clicks", "counter", ("outcome",)),
    ("threadgate_attached_files", "counter", ("kind", "outcome")),
    ("threadgate_bot_turns", "counter", ("outcome",)),
    ("threadgate_build_info", "gauge", ("version", "python")),
    ("threadgate_channel_config_reloads", "counter", ("outcome",)),
    ("threadgate_cited_passages", "counter", ("quote",)),
    ("threadgate_compactions", "counter", ("outcome",)),
    ("threadgate_db_pool_connections", "gauge", ("state",)),
    ("threadgate_db_pool_wait_seconds", "histogram", ()),
    ("threadgate_db_pool_waiting", "gauge", ()),
    ("threadgate_erased_rows", "counter", ("table",)),
    ("threadgate_erasures_pending", "gauge", ()),
    ("threadgate_event_loop_lag_seconds", "histogram", ("loop",)),
    ("threadgate_events", "counter", ("outcome",)),
    ("threadgate_feedback", "counter", ("value",)),
    ("threadgate_home_views", "counter", ("reason", "outcome")),
    ("threadgate_limited_messages", "counter", ("scope",)),
    ("threadgate_mcp_server_up", "gauge", ("server",)),
    ("threadgate_model_attempts", "counter", ("slot", "model", "outcome")),
    ("threadgate_model_cost_usd", "counter", ("model",)),
    ("threadgate_model_request_seconds", "histogram", ("slot", "model")),
    ("threadgate_model_route_up", "gauge", ("model",)),
    ("threadgate_model_tokens", "counter", ("slot", "model", "kind")),
    ("threadgate_model_unpriced_answers", "counter", ("model",)),
    ("threadgate_oldest_task_age_seconds", "gauge", ()),
    ("threadgate_pins", "counter", ("outcome",)),
    ("threadgate_pins_listed", "counter", ()),
    ("threadgate_queue_depth", "gauge", ()),
    ("threadgate_reply_messages", "histogram", ()),
    ("threadgate_retention_deleted", "counter", ("table",)),
    ("threadgate_rounds", "counter", ("decision",)),
    ("threadgate_schedule_approvals", "counter", ("outcome",)),
    ("threadgate_schedule_runs", "counter", ("outcome",)),
    ("threadgate_schedules_refused", "counter", ("cap",)),
    ("threadgate_secrets_redacted", "counter", ("kind",)),
    ("threadgate_shortcuts", "counter", ("step", "outcome")),
    ("threadgate_slack_api_calls", "counter", ("method", "status")),
    ("threadgate_slack_read_tier", "gauge", ("workspace", "tier")),
    ("threadgate_slack_reads", "counter", ("method", "outcome")),
    ("threadgate_slash_commands", "counter", ("subcommand", "outcome")),
    ("threadgate_socket_mode_connected", "gauge", ("app",)),
    ("threadgate_streamed_messages", "counter", ("kind", "outcome")),
    ("threadgate_subtasks", "counter", ("state",)),
    ("threadgate_tasks", "counter", ("outcome",)),
    ("threadgate_tokens_today", "gauge", ("direction",)),
    ("threadgate_tool_calls", "counter", ("server", "tool", "outcome")),
    ("threadgate_tool_progress", "counter", ("server", "tool")),
    ("threadgate_workspace_searches", "counter", ("outcome",)),
]


def _label_names(registry: CollectorRegistry) -> dict[str, tuple[str, ...]]:
    """Each registered family's label names (the registry keeps no public list of them)."""
    collectors = list(registry._collector_to_names)
    assert all(isinstance(c, MetricWrapperBase) for c in collectors)
    return {c._name: tuple(c._labelnames) for c in collectors if isinstance(c, MetricWrapperBase)}


def test_a_fresh_metrics_exposes_every_family_with_its_type_and_labels() -> None:
    """Every family is exposed once, with the type and label names written here."""
    registry = Metrics().registry
    labels = _label_names(registry)
    exposed = sorted(
        (family.name, family.type, labels[family.name]) for family in registry.collect()
    )
    assert exposed == FAMILIES
