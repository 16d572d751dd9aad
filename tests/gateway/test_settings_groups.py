"""Settings in groups: each variable is one group's field, read flat from any source."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import ConfigError
from gateway.config.settings import PLACES, VARIABLES, load_settings


def test_every_variable_is_one_field_of_one_group() -> None:
    """The table of variables names each once, upper case, and its field declares it."""
    assert len(PLACES) == len(VARIABLES) == len({tuple(place) for place in PLACES.values()})
    assert all(name == name.upper() == VARIABLES[name].validation_alias for name in VARIABLES)


def test_the_environment_a_dotenv_file_and_keywords_reach_the_same_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Any case, from any source; a keyword wins over the environment, which wins over the file."""
    env_file = tmp_path / ".env"
    env_file.write_text("threadgate_workers=9\nThreadgate_Role=worker\n")
    monkeypatch.setenv("THREADGATE_WORKERS", "5")
    read = load_settings(env_file=env_file)
    assert (read.tasks.workers, read.process.role) == (5, "worker")
    assert load_settings(env_file=env_file, threadgate_workers=2).tasks.workers == 2


def test_replace_changes_a_setting_by_its_variable_and_validates_it() -> None:
    """The copy has the new value, the original keeps its own; a bad value names the variable."""
    settings = load_settings(env_file=None)
    assert settings.replace(threadgate_role="worker").process.role == "worker"
    assert settings.process.role == "all"
    with pytest.raises(ConfigError, match=r"^THREADGATE_WORKERS is invalid"):
        settings.replace(threadgate_workers=0)
