"""One verified TLS context for every HTTP client the gateway makes.

httpx builds a new `ssl.SSLContext` for each client or transport it is given none for,
and building one reads and parses the whole CA bundle: about 30 ms of CPU each on a small
machine, paid for every model route and the file downloader at every start, and for
every gateway a test process starts (6% of the suite's CPU). A context is meant to be
shared: this one is httpx's own default (`httpx.create_ssl_context()`: certifi's bundle,
or `SSL_CERT_FILE` / `SSL_CERT_DIR` where set), made once per process, so what a client
trusts is what it trusted before.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def verified_tls() -> ssl.SSLContext:
    """The process's verifying context (made on first use)."""
    return httpx.create_ssl_context()
