"""THREADGATE_FILE_TYPES and THREADGATE_FILE_MAX_BYTES: read once, wrong values named."""

from __future__ import annotations

import pytest

from agent import ConfigError
from gateway.config.settings import load_settings


def test_the_defaults_read_images_text_and_pdfs_up_to_10_mb() -> None:
    """Unset: every kind, ten million bytes."""
    settings = load_settings(env_file=None)
    assert settings.files.kinds == {"image", "text", "pdf"}
    assert settings.files.max_bytes == 10_000_000


def test_a_list_of_kinds_is_read_case_and_spacing_aside() -> None:
    """Commas or spaces; empty reads no files at all."""
    assert load_settings(env_file=None, threadgate_file_types="Image, pdf").files.kinds == {
        "image",
        "pdf",
    }
    assert load_settings(env_file=None, threadgate_file_types="").files.kinds == frozenset()


@pytest.mark.parametrize(
    ("variable", "value"),
    [("threadgate_file_types", "image,video"), ("threadgate_file_max_bytes", "0")],
)
def test_a_wrong_value_is_one_sentence_naming_the_variable(variable: str, value: str) -> None:
    """An unknown kind or a cap below one byte stops start-up with the variable's name."""
    with pytest.raises(ConfigError, match=variable.upper()):
        load_settings(env_file=None, **{variable: value})
