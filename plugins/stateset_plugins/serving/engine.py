"""The serving engine: one base model in memory, LoRA adapters switched per batch, continuous batching on one thread.

Requests queue (bounded: `ServerBusy` past ``queue_size`` waiting rows). The engine thread keeps a running batch of
at most ``max_batch`` rows (a request with ``n`` > 1 is n rows), all on one adapter: between decoding steps it
admits waiting requests for the batch's adapter (each is prefilled on its own and its KV cache joined to the
batch's, left-padded), and drops finished rows. A request for another adapter waits until the batch drains, then
that adapter is switched on (``set_adapter``: the base weights are never reloaded). One batch never mixes adapters:
PEFT's mixed-adapter forward runs every LoRA layer once per adapter present over its slice of the batch, which on
a CPU costs more per step than the batching saves; a drained batch switches in microseconds.

Each row samples with its own temperature, top-p and generator (seeded from the request's ``seed`` and the choice
index, so a seeded request repeats). Text is decoded as it grows; what is sent as a delta holds back anything
that may still become tool-call markup or a stop sequence, and the finished text is parsed with the trainer's
tool-call form (`models.chat_format.parse_assistant`). A request that forces a tool call (``force_tool``) has
the call's opening markup appended to its prompt, as if the model had written it: `<tool_call>{"name": "` for any
tool, and the name and `"arguments": ` too for a named one; the reply is that prefix plus what the model generates.
The arguments are not grammar-constrained: a model that never closes the call leaves it in the content.
"""
from __future__ import annotations

import collections
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from stateset_agents.core.errors import InputError
from stateset_agents.plugin_api.serving import Emit, GenerationRequest, ServerBusy
from stateset_plugins.models.chat_format import TOOL_CALL_OPEN, parse_assistant
from stateset_plugins.models.loading import load_base_model, peft_wrapping
from stateset_plugins.models.rendering import ChatRenderer

DEFAULTS = {"max_batch": 8, "queue_size": 64, "max_prompt_tokens": 2048, "max_new_tokens": 1024,
            "generation_timeout_s": 300.0, "device": "auto"}
BASE = None  # the adapter key of requests for the base model


def create(config: Mapping[str, Any]) -> "LoraEngine":
    return LoraEngine(config)


@dataclass
class _Job:
    request: GenerationRequest
    emit: Emit
    adapter: str | None
    prompt: list[int]
    deadline: float
    prefix: str  # the reply's forced start (tool_prefix), part of the prompt
    rows_left: int
    completion_tokens: int = 0
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class _Row:
    job: _Job
    index: int
    generator: torch.Generator | None
    ids: list[int] = field(default_factory=list)
    emitted: str = ""
    last: int = 0  # the token to feed next


def tool_prefix(request: GenerationRequest) -> str:
    """The start a forced tool call gives the reply ("" when the model is free)."""
    if request.force_tool is None:
        return ""
    if not request.tools:
        raise InputError("a forced tool call needs tools", field="tool_choice")
    if request.force_tool == "":
        return TOOL_CALL_OPEN + '{"name": "'
    return TOOL_CALL_OPEN + '{"name": ' + json.dumps(request.force_tool, ensure_ascii=False) + ', "arguments": '


def _held_back(text: str, stops: Sequence[str]) -> str:
    """The part of `text` safe to show now: before any tool-call markup, without a tail that may still grow into
    markup or a stop sequence, an incomplete character, or trailing whitespace (the parsed reply is stripped)."""
    cut = text.find(TOOL_CALL_OPEN)
    if cut >= 0:
        text = text[:cut]
    else:
        hold = 0
        for marker in (TOOL_CALL_OPEN, *stops):
            for k in range(min(len(marker) - 1, len(text)), 0, -1):
                if text.endswith(marker[:k]):
                    hold = max(hold, k)
                    break
        text = text[:len(text) - hold]
    text = text.rstrip("\ufffd")
    return text.strip() if text.strip() else ""


class LoraEngine:
    def __init__(self, config: Mapping[str, Any]):
        self.config = {**DEFAULTS, **{k: v for k, v in dict(config).items() if v is not None}}
        for key in ("max_batch", "queue_size", "max_prompt_tokens", "max_new_tokens"):
            if not isinstance(self.config[key], int) or self.config[key] < 1:
                raise InputError(f"{key} must be a positive integer", field=key)
        from stateset_plugins.models.backend import resolve_device

        model, tokenizer, self.base_identity = load_base_model(self.config.get("base_model"))
        self.base_id = str(self.config.get("base_name") or _base_name(self.config.get("base_model"),
                                                                      self.base_identity))
        self.adapters: dict[str, str] = dict(self.config.get("adapters") or {})
        if self.base_id in self.adapters:
            raise InputError(f"an adapter is named {self.base_id!r}, like the base model", field="adapters")
        if self.adapters:
            from peft import PeftModel

            names = list(self.adapters)
            with peft_wrapping():
                model = PeftModel.from_pretrained(model, self.adapters[names[0]], adapter_name=names[0])
            for name in names[1:]:
                model.load_adapter(self.adapters[name], adapter_name=name)
        self.device = resolve_device(str(self.config["device"]))
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer, int(self.config["max_prompt_tokens"]))
        eos = tokenizer.eos_token_id
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self.eos_ids = {int(i) for i in ([eos] if eos is not None else []) +
                        (list(gen_eos) if isinstance(gen_eos, (list, tuple)) else [gen_eos] if gen_eos else [])}
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids))
        self.context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self._tokenizer_lock = threading.Lock()  # a fast tokenizer is not safe to call from two threads at once
        self._cond = threading.Condition()
        self._waiting: collections.deque[_Job] = collections.deque()
        self._waiting_rows = 0
        self._rows: list[_Row] = []
        self._adapter: str | None = BASE
        self._active: object = ()  # the adapter state the model is in (() : not set yet)
        self._cache = self._mask = None
        self._closed = False
        self.batches = 0
        self._thread = threading.Thread(target=self._loop, name="serving-engine", daemon=True)
        self._thread.start()

    # -- the interface (plugin_api.serving) --------------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        return [{"id": self.base_id, "kind": "base", "identity": self.base_identity},
                *({"id": name, "kind": "adapter", "path": path} for name, path in self.adapters.items())]

    def limits(self) -> dict[str, int]:
        return {k: int(self.config[k]) for k in ("max_prompt_tokens", "max_new_tokens", "max_batch", "queue_size")}

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"ready": self._thread.is_alive() and not self._closed, "queued": self._waiting_rows,
                    "active": len(self._rows), "batches": self.batches,
                    "adapter": self._adapter if self._adapter is not BASE else self.base_id}

    def count_tokens(self, messages, tools=None) -> int:
        return len(self._render(messages, tools))

    def submit(self, request: GenerationRequest, emit: Emit) -> _Job:
        if request.model != self.base_id and request.model not in self.adapters:
            raise InputError(f"the model {request.model!r} does not exist", field="model")
        prefix = tool_prefix(request)
        prompt = self._render(request.messages, request.tools, prefix)
        limit = int(self.config["max_prompt_tokens"])
        if len(prompt) > limit:
            raise InputError(f"the prompt is {len(prompt)} tokens; this server's limit is {limit} "
                             "(max_prompt_tokens)", field="messages")
        if request.max_tokens > int(self.config["max_new_tokens"]):
            raise InputError(f"max_tokens is {request.max_tokens}; this server's limit is "
                             f"{self.config['max_new_tokens']} (max_new_tokens)", field="max_tokens")
        if len(prompt) + request.max_tokens > self.context:
            raise InputError(f"the prompt ({len(prompt)} tokens) plus max_tokens ({request.max_tokens}) exceeds "
                             f"the model's context of {self.context} tokens", field="max_tokens")
        job = _Job(request, emit, None if request.model == self.base_id else request.model, prompt,
                   time.monotonic() + float(self.config["generation_timeout_s"]), prefix, rows_left=request.n)
        with self._cond:
            if self._closed:
                raise ServerBusy("the server is shutting down", retry_after=5)
            if self._waiting_rows + request.n > int(self.config["queue_size"]):
                batch = max(1, len(self._rows))
                raise ServerBusy(f"the queue is full ({self._waiting_rows} rows wait for {batch} decoding)",
                                 retry_after=1 + self._waiting_rows / max(1, int(self.config["max_batch"])))
            self._waiting.append(job)
            self._waiting_rows += request.n
            self._cond.notify()
        return job

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10)

    # -- rendering ---------------------------------------------------------------------------------------------

    def _render(self, messages, tools, prefix: str = "") -> list[int]:
        with self._tokenizer_lock:
            try:
                text = self.renderer.text(messages, tools or None, generation_prompt=True) + prefix
            except InputError:
                raise
            except Exception as exc:  # the template refused the conversation: the request's fault
                raise InputError(f"the conversation cannot be rendered: {exc}", field="messages") from None
            return self.renderer.encode(text)

    def _decode(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return self.tokenizer.decode([i for i in ids if i not in self.eos_ids], skip_special_tokens=True)

    # -- the engine thread -------------------------------------------------------------------------------------

    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._cond:
                while not self._closed and not self._waiting and not self._rows:
                    self._cond.wait()
                if self._closed:
                    pending, self._waiting = list(self._waiting), collections.deque()
                    break
                admitted = self._admit()
            try:
                if admitted:
                    self._prefill(admitted)
                if self._rows:
                    self._step()
            except Exception as exc:  # noqa: BLE001 - fail this batch's requests (and those joining it), keep serving
                jobs = {id(j): j for j in [*admitted, *(r.job for r in self._rows)]}
                for job in jobs.values():
                    self._fail(job, f"generation failed: {type(exc).__name__}: {exc}", 500)
                self._rows, self._cache, self._mask = [], None, None
        for job in pending:
            job.emit({"type": "failed", "message": "the server shut down", "status": 503})

    def _admit(self) -> list[_Job]:
        """Waiting jobs that join the batch now: in arrival order, on the batch's adapter, while rows are free."""
        if not self._rows and self._waiting:
            self._adapter = self._waiting[0].adapter
        room = int(self.config["max_batch"]) - len(self._rows)
        admitted = []
        while self._waiting and self._waiting[0].adapter == self._adapter and self._waiting[0].request.n <= room:
            job = self._waiting.popleft()
            self._waiting_rows -= job.request.n
            if job.cancelled:
                continue
            room -= job.request.n
            admitted.append(job)
        if not self._rows and not admitted and self._waiting:  # n > max_batch: it runs alone, over the limit
            job = self._waiting.popleft()
            self._waiting_rows -= job.request.n
            admitted.append(job)
        return admitted

    def _forward(self, ids, mask, positions, cache):
        if self.adapters and self._active != self._adapter:
            # once per batch, not per step: each call walks the model's modules
            if self._adapter is BASE:
                self.model.base_model.disable_adapter_layers()
            else:
                self.model.base_model.enable_adapter_layers()
                self.model.set_adapter(self._adapter)
            self._active = self._adapter
        return self.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                          logits_to_keep=1)

    def _prefill(self, jobs: list[_Job]) -> None:
        from transformers import DynamicCache

        self.batches += 1
        rows: list[_Row] = []
        prompts: list[list[int]] = []
        for job in jobs:
            for i in range(job.request.n):
                gen = None
                if job.request.temperature > 0:
                    gen = torch.Generator(device=self.device)
                    seed = job.request.seed if job.request.seed is not None else int.from_bytes(os.urandom(6), "big")
                    gen.manual_seed((int(seed) * 1_000_003 + i) % (1 << 63))
                rows.append(_Row(job, i, gen))
                prompts.append(job.prompt)
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, p in enumerate(prompts):
            ids[r, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[r, width - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self._forward(ids, mask, positions, cache)
        self._join(rows, out.cache, mask)
        self._sample(rows, out.logits[:, -1, :])

    def _join(self, rows: list[_Row], cache, mask: torch.Tensor) -> None:
        """Append prefilled rows (their cache and mask) to the running batch, left-padding the shorter side."""
        from transformers import DynamicCache

        if self._cache is None:
            self._rows, self._cache, self._mask = rows, cache, mask
            return
        old_t, new_t = self._mask.shape[1], mask.shape[1]
        width = max(old_t, new_t)

        def pad(t: torch.Tensor, to: int, dim: int) -> torch.Tensor:
            if t.shape[dim] == to:
                return t
            shape = list(t.shape)
            shape[dim] = to - t.shape[dim]
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        layers = []
        for old, new in zip(self._cache.layers, cache.layers):
            layers.append((torch.cat([pad(old.keys, width, 2), pad(new.keys, width, 2)]),
                           torch.cat([pad(old.values, width, 2), pad(new.values, width, 2)])))
        self._cache = DynamicCache(ddp_cache_data=layers)
        self._mask = torch.cat([pad(self._mask, width, 1), pad(mask, width, 1)])
        self._rows = self._rows + rows

    def _step(self) -> None:
        rows = self._rows
        ids = torch.tensor([[r.last] for r in rows], dtype=torch.long, device=self.device)
        self._mask = torch.cat([self._mask, self._mask.new_ones((len(rows), 1))], dim=1)
        # the token fed now sits after the prompt and the tokens before it
        positions = torch.tensor([[len(r.job.prompt) + len(r.ids) - 1] for r in rows], dtype=torch.long,
                                 device=self.device)
        out = self._forward(ids, self._mask, positions, self._cache)
        self._cache = out.cache
        self._sample(rows, out.logits[:, -1, :])

    def _sample(self, rows: list[_Row], logits: torch.Tensor) -> None:
        logits = logits.float()
        finished: list[int] = []
        now = time.monotonic()
        for k, row in enumerate(rows):
            request = row.job.request
            if row.job.cancelled:
                finished.append(k)
                continue
            if now > row.job.deadline:
                finished.append(k)
                self._fail(row.job, f"the generation ran past this server's limit of "
                                    f"{self.config['generation_timeout_s']} s (generation_timeout_s)", 503)
                continue
            scores = logits[k]
            if request.ignore_eos and len(row.ids) + 1 < request.max_tokens:
                scores = scores.clone()
                scores[list(self.eos_ids)] = float("-inf")
            token = self._choose(scores, request, row.generator)
            row.ids.append(token)
            row.last = token
            reason, stop = self._finish_reason(row, token)
            if reason is not None:
                finished.append(k)
                self._done(row, reason, stop)
            else:
                self._delta(row)
        if finished:
            self._drop(finished)

    @staticmethod
    def _choose(scores: torch.Tensor, request: GenerationRequest, generator) -> int:
        if request.temperature <= 0:
            return int(torch.argmax(scores))
        probs = torch.softmax(scores / request.temperature, dim=-1)
        if request.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < request.top_p  # the nucleus, at least one
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        return int(torch.multinomial(probs, 1, generator=generator))

    def _finish_reason(self, row: _Row, token: int) -> tuple[str | None, str | None]:
        request = row.job.request
        if token in self.eos_ids and not request.ignore_eos:
            return "stop", None
        if request.stop:
            text = self._decode(row.ids)
            for stop in request.stop:
                if stop and stop in text:
                    return "stop", stop
        if len(row.ids) >= request.max_tokens:
            return "length", None
        return None, None

    def _text(self, row: _Row, stop: str | None = None) -> str:
        text = self._decode(row.ids)  # a stop sequence ends what was generated, never the forced prefix
        return row.job.prefix + (text[:text.index(stop)] if stop else text)

    def _delta(self, row: _Row) -> None:
        shown = _held_back(self._text(row), row.job.request.stop)
        if len(shown) > len(row.emitted) and shown.startswith(row.emitted):
            row.job.emit({"type": "delta", "index": row.index, "content": shown[len(row.emitted):]})
            row.emitted = shown

    def _done(self, row: _Row, reason: str, stop: str | None) -> None:
        message = parse_assistant(self._text(row, stop))
        content = message.get("content") or ""
        if content.startswith(row.emitted) and len(content) > len(row.emitted):
            row.job.emit({"type": "delta", "index": row.index, "content": content[len(row.emitted):]})
        tokens = len(row.ids)
        row.job.completion_tokens += tokens
        row.job.emit({"type": "done", "index": row.index, "message": message, "finish_reason": reason,
                      "stop_sequence": stop, "completion_tokens": tokens})
        row.job.rows_left -= 1
        if row.job.rows_left == 0:
            row.job.emit({"type": "end", "prompt_tokens": len(row.job.prompt),
                          "completion_tokens": row.job.completion_tokens})

    def _fail(self, job: _Job, message: str, status: int) -> None:
        if not job.cancelled:
            job.cancelled = True  # its other rows end silently
            job.emit({"type": "failed", "message": message, "status": status})

    def _drop(self, finished: list[int]) -> None:
        gone = set(finished)
        keep = [k for k in range(len(self._rows)) if k not in gone]
        if not keep:
            self._rows, self._cache, self._mask = [], None, None
            return
        index = torch.tensor(keep, device=self.device)
        self._rows = [self._rows[k] for k in keep]
        self._cache.batch_select_indices(index)
        self._mask = self._mask[index]
        used = self._mask.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first:  # columns no remaining row attends to: cut them from the cache too
            self._mask = self._mask[:, first:]
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]


def _base_name(spec: str | None, identity: Mapping[str, Any]) -> str:
    from pathlib import Path

    name = Path(str(spec or identity.get("name") or identity.get("path") or "base")).name
    return name[:-len(".gguf")] if name.endswith(".gguf") else name
