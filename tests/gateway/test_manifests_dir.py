"""The deployment files in manifests/ agree with the code they deploy."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from slack_bolt.async_app import AsyncApp

from gateway.config.settings import VARIABLES, Settings, parse_address
from gateway.operator.cli import parser, with_role
from gateway.process.http import build_health_app, build_http_app, build_metrics_app
from gateway.slack.manifest import app_manifest, render_manifest
from gateway.slack.scopes import UNINSTALL_EVENTS, bot_events, bot_scopes
from gateway.telemetry.metrics import Metrics

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


def metrics_routes() -> set[str]:
    return {resource.canonical for resource in build_metrics_app(Metrics()).router.resources()}


def metrics_port(address: str) -> int:
    """The port of a THREADGATE_METRICS_ADDRESS that must be reachable from outside the
    container: on every interface, not loopback."""
    parsed = parse_address(address)
    assert parsed is not None and parsed[0] in ("0.0.0.0", "::"), address
    return parsed[1]


async def _ready() -> bool:
    return True


@pytest.mark.parametrize(
    ("name", "socket_mode"), [("slack-app-http.yaml", False), ("slack-app-socket.yaml", True)]
)
def test_committed_slack_manifests_equal_the_generated_ones(name: str, socket_mode: bool) -> None:
    """manifests/slack-app-*.yaml are `threadgate manifest` output with the default
    settings, byte for byte."""
    text = (MANIFESTS / name).read_text(encoding="utf-8")
    assert text == render_manifest(socket_mode=socket_mode, continue_threads=True), (
        f"regenerate: threadgate manifest{' --socket' if socket_mode else ''} > manifests/{name}"
    )
    manifest = yaml.safe_load(text)
    assert manifest == app_manifest(socket_mode=socket_mode, continue_threads=True)
    continuing = Settings.field("THREADGATE_CONTINUE_THREADS").default
    assert manifest["oauth_config"]["scopes"]["bot"] == list(
        bot_scopes(continue_threads=continuing)
    )
    events = list(bot_events(continue_threads=continuing) + UNINSTALL_EVENTS)
    assert manifest["settings"]["event_subscriptions"]["bot_events"] == events


@pytest.mark.parametrize("path", sorted(MANIFESTS.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_yaml_file_parses(path: Path) -> None:
    """Each YAML file in manifests/ is well-formed and not empty."""
    documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    assert documents and all(isinstance(d, dict) for d in documents)


async def test_deployment_probes_name_routes_the_http_app_serves() -> None:
    """Readiness is /readyz and liveness /healthz, both routes of the HTTP app; the events
    port serves exactly those and /slack/events, and /metrics only the metrics app."""
    container, routes = deployment_container(), await http_routes()
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert routes == {"/readyz", "/healthz", "/slack/events"}
    assert metrics_routes() == {"/metrics"}


def test_service_targets_the_events_port_and_pods_expose_metrics_apart() -> None:
    """The Service's targetPort (by name or number) is the events port, PORT; the metrics
    port is the container's other port, THREADGATE_METRICS_ADDRESS's, and not on the Service."""
    container = deployment_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert ports == {"http": int(env["PORT"]), "metrics": 9090}
    assert metrics_port(env["THREADGATE_METRICS_ADDRESS"]) == ports["metrics"]
    for service_port in load(K8S / "service.yaml")["spec"]["ports"]:
        target = service_port["targetPort"]
        assert ports.get(target, target) == ports["http"] == 3000
    for probe in ("readinessProbe", "livenessProbe"):
        port = container[probe]["httpGet"]["port"]
        assert ports.get(port, port) == ports["http"]


def test_scrape_annotations_name_the_metrics_port_and_path() -> None:
    """The pod's prometheus.io annotations point at the metrics port and /metrics."""
    template = load(K8S / "deployment.yaml")["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    ports = {p["name"]: p["containerPort"] for p in deployment_container()["ports"]}
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == ports["metrics"]
    assert {annotations["prometheus.io/path"]} == metrics_routes()


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
    assert {name.upper() for name in names} <= set(VARIABLES)
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
    """python:3.11-slim, a non-root USER, EXPOSE the events and metrics ports, /healthz
    checked, CMD a real command."""
    instructions = dockerfile()
    values = dict(instructions)  # the last of each instruction wins, as in Docker
    env = dict(pair.split("=", 1) for pair in shlex.split(values["ENV"]))
    assert values["FROM"] == "python:3.11-slim"
    assert values["USER"] not in ("root", "0")
    exposed = values["EXPOSE"].split()
    assert exposed == [env["PORT"], str(metrics_port(env["THREADGATE_METRICS_ADDRESS"]))]
    assert exposed == ["3000", "9090"]
    assert "/healthz" in values["HEALTHCHECK"]
    command = json.loads(values["CMD"])
    assert command[0] == "threadgate" and command[1] in subcommands()
    assert any(k == "RUN" and "useradd" in v and values["USER"] in v for k, v in instructions)


@pytest.mark.parametrize("name", ["ingress", "worker"])
def test_compose_wires_the_gateway_to_a_healthy_postgres(name: str) -> None:
    """compose.yaml: postgres:16 with a healthcheck, each gateway service waits for it and
    reads .env."""
    services = load(MANIFESTS / "compose.yaml")["services"]
    gateway, postgres = services[name], services["postgres"]
    assert postgres["image"] == "postgres:16" and postgres["healthcheck"]["test"]
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert gateway["env_file"]
    assert gateway["environment"]["DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in gateway["environment"]["DATABASE_URL"]
    assert {name.upper() for name in gateway["environment"]} <= set(VARIABLES)
    assert gateway["build"]["dockerfile"] == "manifests/Dockerfile"


def test_compose_publishes_metrics_on_the_host_loopback_only() -> None:
    """The ingress's events port is published; the metrics port only on 127.0.0.1 of the
    host."""
    gateway = load(MANIFESTS / "compose.yaml")["services"]["ingress"]
    environment = gateway["environment"]
    metrics = metrics_port(environment["THREADGATE_METRICS_ADDRESS"])
    assert gateway["ports"] == [
        f"{environment['PORT']}:{environment['PORT']}",
        f"127.0.0.1:{metrics}:{metrics}",
    ]


def serve_role(command: list[str]) -> str:
    """The role a `threadgate serve …` command line runs as (the CLI's own parsing)."""
    assert command[:2] == ["threadgate", "serve"]
    args = parser().parse_args(command[1:])
    return with_role(Settings(), args.role).process.role


def worker_container() -> dict[str, Any]:
    [container] = load(K8S / "worker.yaml")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_compose_runs_one_ingress_and_replicated_workers_without_an_events_port() -> None:
    """Scaled apart: the ingress takes the events; the workers, two of them, publish only
    their metrics, each on a host port of Docker's choosing (replicas cannot share one)."""
    services = load(MANIFESTS / "compose.yaml")["services"]
    assert serve_role(services["ingress"]["command"]) == "ingress"
    assert serve_role(services["worker"]["command"]) == "worker"
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert services["worker"]["ports"] == ["127.0.0.1::9090"]


def gateway_services() -> dict[str, dict[str, Any]]:
    """compose.yaml's services that run threadgate."""
    services = load(MANIFESTS / "compose.yaml")["services"]
    return {name: s for name, s in services.items() if s.get("command", [""])[0] == "threadgate"}


def test_compose_exposes_every_process_metrics_on_the_host_loopback() -> None:
    """Every threadgate service serves /metrics on all of its container's interfaces and
    publishes that port on the host's loopback only."""
    services = gateway_services()
    assert set(services) == {"ingress", "worker"}
    for service in services.values():
        port = metrics_port(service["environment"]["THREADGATE_METRICS_ADDRESS"])
        published = [p for p in service["ports"] if p.endswith(f":{port}")]
        assert len(published) == 1 and published[0].startswith("127.0.0.1:")


def test_compose_prometheus_scrapes_every_process_and_loads_the_alerts() -> None:
    """The monitoring profile's Prometheus finds every replica of every threadgate service
    at its metrics port and path, and loads the alert rules where compose mounts them."""
    services = load(MANIFESTS / "compose.yaml")["services"]
    prometheus, config = services["prometheus"], load(MANIFESTS / "prometheus.yaml")
    assert prometheus["profiles"] == ["monitoring"]
    mounts = dict(v.removesuffix(":ro").split(":", 1) for v in prometheus["volumes"])
    assert mounts["./prometheus.yaml"] in " ".join(prometheus["command"])
    assert config["rule_files"] == [mounts["./prometheus-alerts.yaml"]]
    [job] = config["scrape_configs"]
    assert {job["metrics_path"]} == metrics_routes() and job["job_name"] == "threadgate"
    [discovery] = job["dns_sd_configs"]
    for name, service in gateway_services().items():
        assert name in discovery["names"]
        assert discovery["port"] == metrics_port(
            service["environment"]["THREADGATE_METRICS_ADDRESS"]
        )


async def test_k8s_splits_ingress_and_workers_and_the_service_reaches_only_the_ingress() -> None:
    """deployment.yaml is the ingress (no model settings), worker.yaml the workers (no
    signing secret, replicas, probes on the routes a worker serves); the Service selects
    the ingress pods and not the workers'."""
    ingress, worker = deployment_container(), worker_container()
    assert serve_role(ingress["command"]) == "ingress"
    assert serve_role(worker["command"]) == "worker"
    ingress_env = {e["name"] for e in ingress["env"]}
    worker_env = {e["name"] for e in worker["env"]}
    assert not ingress_env & {"THREADGATE_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}
    assert "SLACK_SIGNING_SECRET" not in worker_env
    assert {"THREADGATE_MODEL", "SLACK_BOT_TOKEN", "DATABASE_URL"} <= worker_env
    assert {name.upper() for name in worker_env} <= set(VARIABLES)
    secret = load(K8S / "secret.example.yaml")["stringData"]
    refs = [e["valueFrom"]["secretKeyRef"]["key"] for e in worker["env"] if "valueFrom" in e]
    assert set(refs) <= set(secret)

    deployment = load(K8S / "worker.yaml")
    assert deployment["spec"]["replicas"] >= 2
    routes = {r.canonical for r in build_health_app(_ready).router.resources()}
    assert routes == {"/healthz", "/readyz"}
    assert worker["readinessProbe"]["httpGet"]["path"] in routes
    assert worker["livenessProbe"]["httpGet"]["path"] in routes

    selector = load(K8S / "service.yaml")["spec"]["selector"]
    worker_labels = deployment["spec"]["template"]["metadata"]["labels"]
    ingress_labels = load(K8S / "deployment.yaml")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= ingress_labels.items()
    assert not selector.items() <= worker_labels.items()
