"""Training rows in, token ids out: dataset loading, the data cursor, and chat rendering.

Rows are curated prompt-completion rows (``prompt``, ``completion``, ``tools``, ``metadata``, ``lineage``); for
multi-turn training a row may also carry ``continuation``: the recorded messages after the completion (user turns,
tool results, later assistant turns). A row of ``{"messages": [...]}`` is split at its first assistant turn.
A row whose ``split`` says validation or test (what `improve run` writes beside curated.jsonl) is refused: the
evaluation splits never train (`stateset_agents.pipeline.splits`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from stateset_agents.errors import InputError
from stateset_agents.jsonio import read_jsonl, sha256_file

from .chat_format import to_text_messages


@dataclass
class Dataset:
    rows: list[dict[str, Any]]
    sha256: str | None = None
    path: str | None = None


def normalise_row(row: Any, where: str, line: int | None) -> dict[str, Any]:
    if not isinstance(row, Mapping):
        raise InputError("a training row must be a JSON object", path=where, line=line)
    from stateset_agents.pipeline.improve import decode_curated
    from stateset_agents.pipeline.splits import LEGACY_HELD_OUT, refuse_evaluation_row

    refuse_evaluation_row(row, where, line)  # validation and test rows never train
    try:  # curated.jsonl keeps `tools` and `metadata` as JSON text (one Arrow type per column)
        row = decode_curated(row)
    except ValueError as exc:
        raise InputError(f"'tools' or 'metadata' is not valid JSON text: {exc}", path=where, line=line) from None
    if "prompt" not in row and isinstance(row.get("messages"), list):
        msgs = row["messages"]
        first = next((i for i, m in enumerate(msgs) if isinstance(m, Mapping) and m.get("role") == "assistant"),
                     None)
        if first is None:
            raise InputError("conversation has no assistant turn", path=where, line=line, field="messages")
        row.update(prompt=msgs[:first], completion=msgs[first], continuation=msgs[first + 1:])
    prompt, completion = row.get("prompt"), row.get("completion")
    if not isinstance(prompt, list) or not all(isinstance(m, Mapping) and "role" in m for m in prompt):
        raise InputError("'prompt' must be a list of messages with a role", path=where, line=line, field="prompt")
    if isinstance(completion, list) and len(completion) == 1:
        completion = completion[0]
    if completion is None and os.path.basename(where) == LEGACY_HELD_OUT:
        raise InputError("this is a held-out evaluation file (held_out.jsonl: prompts, no completions); training "
                         "never reads evaluation rows: train on curated.jsonl", path=where, line=line)
    if not isinstance(completion, Mapping) or completion.get("role") != "assistant":
        raise InputError("'completion' must be one assistant message", path=where, line=line, field="completion")
    row["completion"] = dict(completion)
    row.setdefault("tools", [])
    row.setdefault("metadata", {})
    row.setdefault("continuation", [])
    row.setdefault("id", (row.get("lineage") or {}).get("conversation_id") or f"row{line or 0}")
    if line is not None:
        row["_line"] = line
    return row


def load_dataset(source: str | os.PathLike | Iterable[Mapping[str, Any]]) -> Dataset:
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        rows = [normalise_row(obj, path, number) for number, obj in read_jsonl(path)]
        if not rows:
            raise InputError("the dataset has no rows", path=path)
        return Dataset(rows=rows, sha256=sha256_file(path), path=path)
    rows = [normalise_row(obj, "dataset", i + 1) for i, obj in enumerate(source)]
    if not rows:
        raise InputError("the dataset has no rows")
    return Dataset(rows=rows)


class Cursor:
    """Where the run is in the data: a seeded permutation per epoch, so (epoch, index) alone restores the order."""

    def __init__(self, n: int, seed: int, epoch: int = 0, index: int = 0):
        self.n, self.seed, self.epoch, self.index = n, seed, epoch, index

    def _order(self) -> np.ndarray:
        return np.random.RandomState((self.seed * 1_000_003 + self.epoch) % 2**32).permutation(self.n)

    def take(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if self.index >= self.n:
                self.epoch, self.index = self.epoch + 1, 0
            order = self._order()
            grab = min(k - len(out), self.n - self.index)
            out.extend(int(i) for i in order[self.index:self.index + grab])
            self.index += grab
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}


class ChatRenderer:
    """Messages -> token ids through the tokenizer's chat template, tool calls in the text form of `chat_format`."""

    def __init__(self, tokenizer, max_prompt_tokens: int):
        if not getattr(tokenizer, "chat_template", None):
            raise InputError("the tokenizer has no chat template; training renders conversations with it")
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.eos_text = tokenizer.eos_token or ""

    def text(self, messages: Sequence[Mapping], tools=None, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(to_text_messages(messages, tools), tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages, tools=None) -> list[int]:
        ids = self.encode(self.text(messages, tools, generation_prompt=True))
        return ids[-self.max_prompt_tokens:]  # keep the end: the turn being answered

    def completion_ids(self, messages, completion, tools=None) -> list[int]:
        """The completion as the template renders it after the generation prompt, through its end token."""
        before = self.text(messages, tools, generation_prompt=True)
        full = self.text(list(messages) + [completion], tools)
        if not full.startswith(before):
            raise InputError("the chat template does not render the completion as a continuation of the prompt")
        text = full[len(before):]
        if self.eos_text and self.eos_text in text:
            text = text[:text.index(self.eos_text) + len(self.eos_text)]
        return self.encode(text)

    def continuation_ids(self, history, new_messages, tools=None) -> list[int]:
        """Tokens that follow a sampled assistant turn (which ended at its end token): the template's text after
        that turn, the replayed messages, and the next generation prompt."""
        done = self.text(history, tools)
        after = self.text(list(history) + list(new_messages), tools, generation_prompt=True)
        if not after.startswith(done):
            raise InputError("the chat template does not render a conversation incrementally")
        tail = ""
        if self.eos_text and self.eos_text in done:
            tail = done[done.rindex(self.eos_text) + len(self.eos_text):]
        return self.encode(tail + after[len(done):])
