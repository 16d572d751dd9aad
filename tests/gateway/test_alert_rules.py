"""manifests/prometheus-alerts.yaml is a rule file Prometheus loads, about metrics that exist.

Each rule is an alert with an expression, a severity and a summary, and its expression
names only series the gateway exposes (or Prometheus's own `up`): a metric renamed in the
code fails here before an alert silently never fires.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.telemetry.metrics import Metrics

RULES = Path(__file__).resolve().parents[2] / "manifests" / "prometheus-alerts.yaml"
# Series Prometheus itself records for every target.
PROMETHEUS_OWN = {"up"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or"}
_KEYWORDS |= {"unless", "bool", "offset", "inf", "nan"}
# The series a family is exposed as, by its type.
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def exposed_series() -> set[str]:
    """Every series name a fresh `Metrics` exposes."""
    return {
        family.name + suffix
        for family in Metrics().registry.collect()
        for suffix in _SUFFIXES[family.type]
    }


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label
    matchers, grouping clauses, ranges, numbers, keywords and function names are gone."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings, as in {outcome="ok"}
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    names = re.findall(r"(?<![\w.])([A-Za-z_:][\w:]*)\b(?!\s*\()", text)
    return {name for name in names if name.lower() not in _KEYWORDS}


def test_the_name_finder_reads_selectors_not_functions_or_labels() -> None:
    """A check on the checker: functions, labels, grouping and keywords are not metrics."""
    expr = (
        'sum by (model, outcome) (rate(a_total{outcome!="ok",x=~"y|z"}[5m])) / '
        "histogram_quantile(0.99, sum by (le) (rate(b_bucket[5m]))) > 1 and on (job) up == 0"
    )
    assert metric_names(expr) == {"a_total", "b_bucket", "up"}


def test_the_file_is_a_prometheus_rule_file_of_alerts() -> None:
    """One or more groups, each named, of rules that each alert with an expression, a
    severity and a summary; alert names are unique."""
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert document.keys() == {"groups"}
    assert all(group["name"] and group["rules"] for group in document["groups"])
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names)) >= 6
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["expr"].strip() and rule["labels"]["severity"] in ("page", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule["alert"]


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: rule["alert"])
def test_each_rule_names_only_series_the_gateway_exposes(rule: dict[str, Any]) -> None:
    """Every metric a rule's expression selects is exposed by the gateway, or is `up`."""
    names = metric_names(rule["expr"])
    assert names and sorted(names - exposed_series() - PROMETHEUS_OWN) == []


def test_the_rules_watch_what_an_on_call_asks_first() -> None:
    """The queue, its oldest task, model attempts, refused events and scrape health each
    have a rule."""
    watched = set().union(*(metric_names(rule["expr"]) for rule in rules()))
    expected = {
        "threadgate_queue_depth",
        "threadgate_oldest_task_age_seconds",
        "threadgate_model_attempts_total",
        "threadgate_events_total",
        "up",
    }
    assert expected <= watched
