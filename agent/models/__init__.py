"""The model layer: the provider-neutral contract (`Model`, messages, tools), the providers
that speak the OpenAI and Anthropic wire formats over httpx, the attempt ladder that
retries and falls back, and the circuit that stops a refused credential from being tried
again. Imports only `agent.core`."""
