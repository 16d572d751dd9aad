"""The MCP config file: the common `mcpServers` shape, `${VAR}` expansion, and one clear
sentence naming THREADGATE_MCP_CONFIG, the server and the field — never a value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import ConfigError, load_mcp_config, parse_mcp_config

ENV = {"GITHUB_TOKEN": "ghp-secret-value-123", "ROOT": "/srv/docs"}
EXAMPLE: dict[str, Any] = {
    "mcpServers": {
        "github": {
            "type": "http",
            "url": "https://api.example.com/mcp/",
            "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
            "allowedTools": ["search_issues"],
            "timeoutSeconds": 20,
            "maxOutputChars": 8000,
        },
        "docs": {"command": "docs-mcp", "args": ["--root", "${ROOT}", "${MODE:-fast}"]},
        "off": {"command": "unused", "disabled": True},
    },
    "subtasks": {"research": {"servers": ["github"]}},
}


def test_the_common_shape_is_read_with_our_keys() -> None:
    """stdio and HTTP servers, `${VAR}` and `${VAR:-default}` expanded, limits, allowlist,
    disabled servers left out, subtask types mapped to servers."""
    config = parse_mcp_config(EXAMPLE, ENV)
    github, docs = config.enabled
    assert (github.transport, docs.transport) == ("http", "stdio")
    assert github.headers == {"Authorization": "Bearer ghp-secret-value-123"}
    assert docs.args == ("--root", "/srv/docs", "fast")
    assert (github.timeout_seconds, github.max_output_chars) == (20, 8000)
    assert github.allows("search_issues") and not github.allows("delete_repo")
    assert docs.allows("anything")
    assert config.subtask_types_of("github") == {"research"}
    assert config.subtask_types_of("docs") == frozenset()
    assert "ghp-secret-value-123" in config.secrets()
    assert "Bearer ghp-secret-value-123" in config.secrets()


def test_a_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(EXAMPLE))
    assert len(load_mcp_config(path, ENV).enabled) == 2


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"headers": {"Authorization": "Bearer ${MISSING}"}},
            'server "github" headers.Authorization uses ${MISSING}',
        ),
        ({"allowedtools": ["x"]}, 'server "github" field allowedtools: extra inputs'),
        ({"command": "x"}, 'server "github" give either command'),
        ({"url": "ftp://example.com"}, 'server "github" url must start with http'),
        ({"timeoutSeconds": -1}, 'server "github" field timeoutSeconds'),
        ({"type": "stdio"}, 'server "github" type "stdio" needs a command'),
    ],
)
def test_a_bad_server_is_one_sentence_naming_server_and_field(
    change: dict[str, Any], expected: str
) -> None:
    raw = json.loads(json.dumps(EXAMPLE))
    raw["mcpServers"]["github"].update(change)
    with pytest.raises(ConfigError) as caught:
        parse_mcp_config(raw, ENV)
    message = str(caught.value)
    assert message.startswith("THREADGATE_MCP_CONFIG") and expected in message, message
    assert "ghp-secret-value-123" not in message and message.count("\n") == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([], 'must be a JSON object with an "mcpServers" object'),
        ({"mcpServers": []}, 'must be a JSON object with an "mcpServers" object'),
        ({"mcpServers": {"a__b": {"command": "x"}}}, "server name 'a__b'"),
        ({"mcpServers": {"ok": "x"}}, 'server "ok" must be a JSON object'),
        ({"mcpServers": {}, "subtasks": {"agent": {"servers": ["nope"]}}}, "names server(s) nope"),
    ],
)
def test_a_bad_file_names_the_variable(raw: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match="THREADGATE_MCP_CONFIG") as caught:
        parse_mcp_config(raw, {})
    assert expected in str(caught.value)


def test_an_unreadable_or_malformed_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"THREADGATE_MCP_CONFIG names .* cannot be read"):
        load_mcp_config(tmp_path / "missing.json", {})
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {')
    with pytest.raises(ConfigError, match=r"THREADGATE_MCP_CONFIG \(.*\) is not valid JSON"):
        load_mcp_config(broken, {})


secret_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=8, max_size=40
).filter(lambda s: s.strip() == s and "${" not in s)


@given(secret=secret_text)
def test_a_secret_never_appears_in_an_error(secret: str) -> None:
    """Whatever a variable holds, a config error about the entry that uses it does not
    repeat it (the entry is invalid for another reason: an unknown key)."""
    raw = {
        "mcpServers": {"s": {"url": "http://h/${TOKEN}", "headers": {"X": "${TOKEN}"}, "bogus": 1}}
    }
    with pytest.raises(ConfigError) as caught:
        parse_mcp_config(raw, {"TOKEN": secret})
    assert secret not in str(caught.value)


@given(value=st.text(max_size=60).filter(lambda s: "${" not in s))
def test_text_without_references_is_left_as_it_is(value: str) -> None:
    raw = {"mcpServers": {"s": {"command": "x", "args": [value], "env": {"K": value}}}}
    [server] = parse_mcp_config(raw, {}).enabled
    assert server.args == (value,) and server.env == {"K": value}


@given(name=st.text(alphabet="ABCxyz_09", min_size=1, max_size=12), value=secret_text)
def test_every_reference_is_replaced_and_kept_secret(name: str, value: str) -> None:
    variable = f"V{name}"
    raw = {"mcpServers": {"s": {"command": "x", "args": [f"a${{{variable}}}b"]}}}
    config = parse_mcp_config(raw, {variable: value})
    assert config.enabled[0].args == (f"a{value}b",)
    assert value in config.secrets()


@pytest.mark.parametrize(
    ("given", "asked"),
    [(True, {"a": True, "b": True}), (["a"], {"a": True, "b": False}), (False, {"a": False})],
)
def test_require_approval_is_all_tools_or_a_list(given: Any, asked: dict[str, bool]) -> None:
    """`requireApproval`: true for every tool of the server, or the tools it names."""
    entry = {"command": "x", "requireApproval": given}
    server = parse_mcp_config({"mcpServers": {"s": entry}}, {}).servers["s"]
    assert {tool: server.needs_approval(tool) for tool in asked} == asked


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("yes", "requireApproval"),
        (1, "requireApproval"),
        (["b"], "requireApproval names b, which allowedTools does not allow"),
    ],
)
def test_a_wrong_require_approval_is_one_sentence(given: Any, said: str) -> None:
    """Not a boolean or a list, or naming a tool the allowlist leaves out: refused, with the
    server and the field named (a typo must not leave a tool ungated)."""
    entry = {"command": "x", "allowedTools": ["a"], "requireApproval": given}
    with pytest.raises(ConfigError) as raised:
        parse_mcp_config({"mcpServers": {"s": entry}}, {})
    assert 'server "s"' in str(raised.value) and said in str(raised.value)
