"""The deployment files in manifests/ agree with the code they deploy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_bolt.async_app import AsyncApp

from gateway.cli import parser
from gateway.config import Settings
from gateway.http import build_http_app
from gateway.manifest import app_manifest, render_manifest
from gateway.metrics import Metrics
from gateway.scopes import BOT_EVENTS, REQUIRED_BOT_SCOPES

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
K8S = MANIFESTS / "k8s"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def deployment_container() -> dict[str, Any]:
    containers = load(K8S / "deployment.yaml")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def subcommands() -> set[str]:
    action = next(a for a in parser()._actions if a.dest == "==SUPPRESS==" and a.choices)
    return set(action.choices or ())


async def http_routes() -> set[str]:
    bolt = AsyncApp(signing_secret="secret", token="xoxb-test")
    app = build_http_app(bolt=bolt, signing_secret="secret", ready=_ready, metrics=Metrics())
    return {resource.canonical for resource in app.router.resources()}


async def _ready() -> bool:
    return True


@pytest.mark.parametrize(
    ("name", "socket_mode"), [("slack-app-http.yaml", False), ("slack-app-socket.yaml", True)]
)
def test_committed_slack_manifests_equal_the_generated_ones(name: str, socket_mode: bool) -> None:
    """manifests/slack-app-*.yaml are `threadgate manifest` output, byte for byte."""
    text = (MANIFESTS / name).read_text(encoding="utf-8")
    assert text == render_manifest(socket_mode=socket_mode), (
        f"regenerate: threadgate manifest{' --socket' if socket_mode else ''} > manifests/{name}"
    )
    manifest = yaml.safe_load(text)
    assert manifest == app_manifest(socket_mode=socket_mode)
    assert manifest["oauth_config"]["scopes"]["bot"] == list(REQUIRED_BOT_SCOPES)
    assert manifest["settings"]["event_subscriptions"]["bot_events"] == list(BOT_EVENTS)


@pytest.mark.parametrize("path", sorted(MANIFESTS.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_yaml_file_parses(path: Path) -> None:
    """Each YAML file in manifests/ is well-formed and not empty."""
    documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert documents and all(isinstance(d, dict) for d in documents)


async def test_deployment_probes_name_routes_the_http_app_serves() -> None:
    """Readiness is /readyz and liveness /healthz, both routes of the HTTP app."""
    container, routes = deployment_container(), await http_routes()
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {"/readyz", "/healthz", "/slack/events"} <= routes


def test_service_targets_the_container_port() -> None:
    """The Service's targetPort (by name or number) is the container's port, and so is PORT."""
    container = deployment_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    for service_port in load(K8S / "service.yaml")["spec"]["ports"]:
        target = service_port["targetPort"]
        assert ports.get(target, target) in ports.values()
    for probe in ("readinessProbe", "livenessProbe"):
        port = container[probe]["httpGet"]["port"]
        assert ports.get(port, port) in ports.values()
    assert set(ports.values()) == {int(env["PORT"])} == {3000}


def test_service_selects_the_deployment_pods() -> None:
    """The Service selector matches the pod template's labels."""
    deployment, service = load(K8S / "deployment.yaml"), load(K8S / "service.yaml")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_deployment_sets_only_real_settings_from_the_example_secret() -> None:
    """Every env var is a Settings field; every secret key it reads exists in the example."""
    container = deployment_container()
    names = [e["name"] for e in container["env"]]
    assert {name.lower() for name in names} <= set(Settings.model_fields)
    secret = load(K8S / "secret.example.yaml")
    refs = [e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e]
    assert refs and all(ref["name"] == secret["metadata"]["name"] for ref in refs)
    assert {ref["key"] for ref in refs} <= set(secret["stringData"])
    assert {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "DATABASE_URL"} <= {r["key"] for r in refs}


def test_example_secret_holds_placeholders_only() -> None:
    """No value in the example Secret could be a real credential."""
    values = load(K8S / "secret.example.yaml")["stringData"].values()
    assert values and all("REPLACE-ME" in value for value in values)


def test_deployment_requests_resources_and_runs_unprivileged() -> None:
    """Resource requests are set; the pod runs as a non-root user."""
    deployment = load(K8S / "deployment.yaml")
    container = deployment_container()
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["command"][0] == "threadgate" and container["command"][1] in subcommands()


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) pairs, continuation lines joined, comments dropped."""
    text = (MANIFESTS / "Dockerfile").read_text(encoding="utf-8")
    joined = re.sub(r"\\\n", " ", text)
    lines = [line.strip() for line in joined.splitlines()]
    pairs = [line.split(None, 1) for line in lines if line and not line.startswith("#")]
    return [(p[0].upper(), p[1] if len(p) > 1 else "") for p in pairs]


def test_dockerfile_serves_as_a_non_root_user_with_a_healthcheck() -> None:
    """python:3.11-slim, a non-root USER, EXPOSE 3000, /healthz checked, CMD a real command."""
    instructions = dockerfile()
    values = dict(instructions)  # the last of each instruction wins, as in Docker
    assert values["FROM"] == "python:3.11-slim"
    assert values["USER"] not in ("root", "0")
    assert values["EXPOSE"] == "3000"
    assert "/healthz" in values["HEALTHCHECK"]
    command = json.loads(values["CMD"])
    assert command[0] == "threadgate" and command[1] in subcommands()
    assert any(k == "RUN" and "useradd" in v and values["USER"] in v for k, v in instructions)


def test_compose_wires_the_gateway_to_a_healthy_postgres() -> None:
    """compose.yaml: postgres:16 with a healthcheck, the gateway waits for it and reads .env."""
    services = load(MANIFESTS / "compose.yaml")["services"]
    gateway, postgres = services["gateway"], services["postgres"]
    assert postgres["image"] == "postgres:16" and postgres["healthcheck"]["test"]
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert gateway["env_file"]
    assert gateway["environment"]["DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in gateway["environment"]["DATABASE_URL"]
    assert {name.lower() for name in gateway["environment"]} <= set(Settings.model_fields)
    assert gateway["build"]["dockerfile"] == "manifests/Dockerfile"
