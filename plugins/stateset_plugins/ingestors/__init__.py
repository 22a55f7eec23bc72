"""First-party ingestors: `ingestor:openai` and `ingestor:anthropic` (log formats -> OpenAI-shaped transcripts).

Registered by lazy "module:attr" paths: listing the components imports no ingestor module. Each registration
repeats its class's name, version and capabilities; loading the class checks name and version.
"""
from __future__ import annotations

from stateset_agents import hookimpl

_INGESTORS = (  # (module, class, name, version)
    ("openai", "OpenAIIngestor", "openai", "1.0.0"),
    ("anthropic", "AnthropicIngestor", "anthropic", "1.0.0"),
)
CAPABILITIES = ("stitch_call_logs",)
__all__ = [cls for _, cls, _, _ in _INGESTORS]


def __getattr__(attr: str):
    for module, cls, _, _ in _INGESTORS:
        if attr == cls:
            import importlib

            return getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


@hookimpl
def register_ingestors(register):
    for module, cls, name, version in _INGESTORS:
        register(f"{__name__}.{module}:{cls}", name=name, version=version, capabilities=CAPABILITIES)
