"""The vendors threadgate speaks to, and the names of the settings that configure them.

One owner for these facts: the defaults (`ProviderSettings`, the gateway's settings),
the key checks in `open_model`, the credential errors of `classify` and the operator
alerts all read them from here, so an alert can never name a variable the settings do
not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Vendor:
    """A model vendor's API: its name in `provider:model`, default URL and setting names."""

    name: str
    base_url: str
    key_variable: str
    base_url_variable: str
    key_name: str

    @property
    def host(self) -> str:
        """The vendor's own API host: a key is required only when talking to it."""
        return urlsplit(self.base_url).hostname or ""


OPENAI = Vendor(
    "openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_BASE_URL", "the OpenAI API key"
)
ANTHROPIC = Vendor(
    "anthropic",
    "https://api.anthropic.com",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "the Anthropic API key",
)
VENDORS = {vendor.name: vendor for vendor in (OPENAI, ANTHROPIC)}

GATEWAY_TOKEN_VARIABLE = "THREADGATE_GATEWAY_TOKEN"
GATEWAY_HEADER_VARIABLE = "THREADGATE_GATEWAY_HEADER"
DEFAULT_GATEWAY_HEADER = "cf-aig-authorization"  # Cloudflare AI Gateway's
DEFAULT_MODEL_TIMEOUT = 60.0


def key_variable(provider: str) -> str:
    """The setting that holds `provider`'s API key, or a description when it is unknown."""
    vendor = VENDORS.get(provider)
    return vendor.key_variable if vendor else "the provider API key variable"
