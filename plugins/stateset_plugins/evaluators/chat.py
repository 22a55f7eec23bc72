"""`evaluator:chat`: one assistant reply to a conversation, for `stateset-agents chat` (and anything else that
wants a reply in any runtime).

Request: ``messages`` (the history, OpenAI-shaped; required), ``tools``, and optionally ``base_model``,
``adapter``, ``temperature``, ``max_new_tokens``, ``seed``, ``max_prompt_tokens`` (the component's config supplies
defaults). The completed event carries ``message`` (the reply, tool calls parsed out of the text as training renders
them), ``text``, ``truncated`` and ``tokens``. The loaded model is cached across calls for the same base model and
adapter, so a session loads it once.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from stateset_agents import Evaluator
from stateset_agents.core.errors import InputError, StatesetError
from stateset_plugins.models.chat import completed_event, decoding_of

from . import VERSION
from .model_session import load_session, resolve_base_model, run_manifest_of, verify_adapter


class ChatEvaluator(Evaluator):
    name = "chat"
    version = VERSION
    capabilities = ("chat", "model_cache")

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self._sessions: dict[tuple, Any] = {}

    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            yield from self._reply({**self.config, **dict(request)})
        except StatesetError as exc:
            yield {"type": "failed", "reason": "error", "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a stream must end with completed or failed
            yield {"type": "failed", "reason": type(exc).__name__, "message": str(exc)}

    def _session(self, request: Mapping[str, Any]):
        adapter = request.get("adapter") or None
        manifest = run_manifest_of(adapter)
        base_model = resolve_base_model(request.get("base_model"), manifest)
        decoding = decoding_of(request)
        key = (base_model, adapter, decoding["max_prompt_tokens"])
        if key not in self._sessions:
            if adapter:
                verify_adapter(adapter, manifest)
            self._sessions.clear()  # one model in memory at a time
            self._sessions[key] = load_session(base_model, adapter, decoding)
        return self._sessions[key], decoding

    def _reply(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        from stateset_plugins.models.seeding import seed_everything

        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InputError("the request needs 'messages': the conversation so far", field="messages")
        if messages[-1].get("role") == "assistant":
            raise InputError("the last message is already the assistant's; add a user message", field="messages")
        session, decoding = self._session(request)
        seed_everything(int(decoding["seed"]))  # same history, same seed: same reply
        prompt = session.renderer.prompt_ids(messages, request.get("tools") or None)
        generation = session.backend.generate([prompt], max_new_tokens=int(decoding["max_new_tokens"]),
                                              temperature=float(decoding["temperature"]),
                                              adapter=session.adapter is not None)[0]
        yield completed_event(session.renderer.tokenizer, generation.ids, generation.truncated,
                              base_model=session.base_model, adapter=session.adapter)
