"""First-party ingestors: `ingestor:openai` and `ingestor:anthropic` (log formats -> OpenAI-shaped transcripts)."""
from __future__ import annotations

from stateset_agents import hookimpl

from .anthropic import AnthropicIngestor
from .openai import OpenAIIngestor

__all__ = ["OpenAIIngestor", "AnthropicIngestor"]


@hookimpl
def register_ingestors(register):
    register(OpenAIIngestor)
    register(AnthropicIngestor)
