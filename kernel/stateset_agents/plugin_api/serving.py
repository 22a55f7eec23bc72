"""The serving interface: what `stateset-agents serve` asks of the plugin that hosts the model.

A plugin offers a serving engine through the `register_serving` hook (``register(name, target="module:attr",
requires=[...], install=...)``); the target is a factory ``create(config) -> engine``. The gateway (the kernel's
HTTP face) parses requests, checks keys, renders each API's response shape and writes the capture; the engine holds
the model: it renders conversations to tokens (tool calls in the trainer's text form), batches concurrent requests,
generates off the caller's thread, and parses tool calls out of the generated text.

``config`` (a mapping): ``base_model`` (a path, ``.gguf`` file, hub id, or None: the offline default), ``adapters``
({served name: adapter directory}, all trained on that base), ``max_batch`` (rows decoded together),
``queue_size`` (rows waiting beyond the batch before `ServerBusy`), ``max_prompt_tokens``, ``max_new_tokens``
(the most a request may ask for), ``generation_timeout_s``, ``device``.

The engine (duck-typed; this module's `ServingEngine` documents it):

* ``models() -> list[dict]``: ``{"id", "kind": "base" | "adapter", "path"?}`` for the base and each adapter;
* ``limits() -> dict``: ``max_prompt_tokens``, ``max_new_tokens``, ``max_batch``, ``queue_size``;
* ``count_tokens(messages, tools) -> int``: the rendered prompt's length (InputError when a message is malformed);
* ``submit(request: GenerationRequest, emit) -> Ticket``: renders and queues the request, raising InputError for a
  prompt over ``max_prompt_tokens`` (naming the limit) or an unknown model, and `ServerBusy` when the queue is full.
  ``emit(event)`` is then called from the engine's thread with, in order per choice ``index``:
  ``{"type": "delta", "index", "content"}`` (text to show, tool-call markup held back), then
  ``{"type": "done", "index", "message" (OpenAI-shaped, tool calls parsed), "finish_reason": "stop" | "length",
  "stop_sequence": str | None, "completion_tokens"}``; after every choice ``{"type": "end", "prompt_tokens",
  "completion_tokens"}``; or, at any point, ``{"type": "failed", "message", "status"}`` and nothing after it.
  ``Ticket.cancel()`` drops the request's rows at the next step (a client that went away);
* ``stats() -> dict`` (``queued``, ``active``, ``batches``, ``ready``) and ``close()``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from ..core.errors import StatesetError

Event = dict[str, Any]
Emit = Callable[[Event], None]


class ServerBusy(StatesetError):
    """The queue is full: the caller should retry after ``retry_after`` seconds (HTTP 429)."""

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = max(1.0, float(retry_after))


@dataclass
class GenerationRequest:
    """One request, in the gateway's neutral form (messages and tools OpenAI-shaped, whichever API it came by)."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: Sequence[str] = ()
    seed: int | None = None
    n: int = 1
    ignore_eos: bool = False  # vLLM's extension: generate exactly max_tokens (benchmarks)
    # tool_choice that forces a call: "" = some tool (OpenAI "required", Anthropic "any"), "NAME" = that tool;
    # None leaves the model free. An engine forces it by starting the reply with the call's opening markup.
    force_tool: str | None = None


class Ticket(Protocol):
    def cancel(self) -> None: ...


class ServingEngine(Protocol):
    def models(self) -> list[dict[str, Any]]: ...

    def limits(self) -> dict[str, int]: ...

    def count_tokens(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> int: ...

    def submit(self, request: GenerationRequest, emit: Emit) -> Ticket: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
