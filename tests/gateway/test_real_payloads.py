"""Slack's payload shapes, replayed: every event and interaction in
tests/gateway/slack_payloads (in the shapes Slack's SDK repositories test with, values of
our own: README.md there) is signed and POSTed to a running
gateway as Slack would send it, and answered with a 2xx or a 4xx, never a 500 or a
traceback. Two shapes that used to be a 500 and a 400 have tests of their own: a workflow
step without its `workflow_step` (4xx), and an organization-wide uninstall that names only
its enterprise (2xx, and the org's installation is forgotten).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.slack_events import deliver_interaction
from tests.gateway.rig import SECRET, Rig
from tests.logged import errors_logged

CORPUS = Path(__file__).parent / "slack_payloads"
SOURCES: dict[str, str] = json.loads((CORPUS / "sources.json").read_text())


def payload(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CORPUS / name).read_text())
    return loaded


async def replay(rig: Rig, name: str, body: dict[str, Any]) -> tuple[int, str]:
    """POST one payload as Slack sends its kind: events as JSON, interactions as a form."""
    if name.startswith("interactions/"):
        return await deliver_interaction(rig.http, rig.events_url, body, SECRET)
    return await rig.send(body)


def test_every_payload_file_names_its_source() -> None:
    """Each payload in the corpus is listed with the repository and file whose shape it
    follows."""
    files = {p.relative_to(CORPUS).as_posix() for p in CORPUS.glob("*/*.json")}
    assert files == set(SOURCES)
    assert all(source.startswith("slackapi/") for source in SOURCES.values())


@pytest.mark.parametrize("name", sorted(SOURCES))
async def test_each_real_payload_gets_a_2xx_or_a_4xx_and_no_traceback(rig: Rig, name: str) -> None:
    """A payload in a shape Slack's SDKs test with is answered 2xx or 4xx, with nothing
    logged as an error."""
    with errors_logged() as errors:
        status, text = await replay(rig, name, payload(name))
    assert status < 500, f"{name}: {status} {text}"
    assert not errors, [r.getMessage() for r in errors]


@pytest.mark.parametrize(
    "name", ["interactions/workflow_step_edit.json", "interactions/workflow_step_save.json"]
)
async def test_a_workflow_step_without_its_step_object_is_a_4xx(rig: Rig, name: str) -> None:
    """A signed `workflow_step_edit`, or a `view_submission` of a `workflow_step` view,
    without its `workflow_step` object is refused with a 4xx and no error logged."""
    body = copy.deepcopy(payload(name))
    del body["workflow_step"]
    with errors_logged() as errors:
        status, text = await replay(rig, name, body)
    assert 400 <= status < 500, f"{status} {text}"
    assert "workflow_step" in text
    assert not errors, [r.getMessage() for r in errors]


@pytest.mark.rig(oauth=True)
@pytest.mark.parametrize(
    "name", ["events/org_app_uninstalled.json", "events/org_tokens_revoked.json"]
)
async def test_an_org_wide_uninstall_naming_only_its_enterprise_forgets_the_org(
    rig: Rig, name: str
) -> None:
    """Enterprise Grid: an `app_uninstalled` or `tokens_revoked` that carries the
    enterprise and no team is acked and deletes the org's installation, and no other."""
    assert rig.slack.oauth is not None
    body = payload(name)
    org = body["enterprise_id"]
    state = await rig.begin_install()
    code = rig.slack.oauth.grant(None, enterprise_id=org, org=True)
    assert (await rig.finish_install(code, state))[0] == 200
    await rig.install("T2")
    rig.slack.oauth.uninstall(None, org)
    status, text = await replay(rig, name, body)
    assert status == 200, text
    rows = await rig.db.pool.fetch("SELECT team_id, enterprise_id FROM slack_installations")
    assert [(r["team_id"], r["enterprise_id"]) for r in rows] == [("T2", None)]
