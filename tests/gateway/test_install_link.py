"""The install page's "Add to Slack" link carries the visitor's `?team=` as one encoded
value: it cannot add parameters of the visitor's choosing to our authorize link (issue 37,
item 8)."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.rig import CLIENT_ID, Rig

pytestmark = pytest.mark.rig(oauth=True)


async def authorize_link(rig: Rig, team: str | None) -> dict[str, list[str]]:
    """GET /slack/install (with `team`): the query of the page's authorize link."""
    params = {"team": team} if team is not None else {}
    async with rig.http.get(f"{rig.base_url}/slack/install", params=params) as response:
        assert response.status == 200
        page = await response.text()
    match = re.search(r'<a href="([^"]*)"', page)
    assert match is not None, page
    return parse_qs(urlsplit(html.unescape(match.group(1))).query, keep_blank_values=True)


async def test_a_team_that_smuggles_parameters_stays_one_value(rig: Rig) -> None:
    """`?team=T1&scope=admin&redirect_uri=…`, encoded into the one parameter, is the
    link's `team` and nothing more: its scope, client and redirect are ours."""
    smuggled = "T1&scope=admin&client_id=9.9&redirect_uri=https://evil.example/cb#x"
    query = await authorize_link(rig, smuggled)
    assert query["team"] == [smuggled]
    assert query["client_id"] == [CLIENT_ID] and "admin" not in query["scope"][0].split(",")
    assert "redirect_uri" not in query and len(query["scope"]) == 1


async def test_without_a_team_the_link_names_none(rig: Rig) -> None:
    """No `?team=`: the link has no team parameter, and one state."""
    query = await authorize_link(rig, None)
    assert "team" not in query and len(query["state"]) == 1


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    team=st.text(
        st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
        min_size=1,
        max_size=40,
    )
)
async def test_any_team_reaches_the_link_as_it_was_given(rig: Rig, team: str) -> None:
    """Whatever the visitor puts in `?team=`, the link's `team` is exactly that, once."""
    query = await authorize_link(rig, team)
    assert query["team"] == [team] and query["client_id"] == [CLIENT_ID]
