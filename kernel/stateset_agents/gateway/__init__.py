"""The REST gateway: `stateset-agents serve`, OpenAI- and Anthropic-compatible inference over the adapters in a
deploy registry, conversation capture in ingest's call-log format, and API keys.

A face of the kernel, thin: routes parse and check requests (`chat_api`, `messages_api`), `app` authenticates,
limits and renders errors in each API's shape, `capture` writes what was served, `keys` holds the hashed keys, and
the model itself is a plugin's serving engine found through the registry (`plugin_api.serving`). Nothing here
imports FastAPI, uvicorn or torch at import time of the CLI: `serve` imports `app` inside its body.
"""
