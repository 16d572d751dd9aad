"""The loopback-only socket guard, for the test process and (via `sitecustomize`) its children."""
