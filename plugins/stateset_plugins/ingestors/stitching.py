"""Stitching call logs (one API call a line) back into conversations.

A chat client sends the whole conversation on every call, so call k+1's request repeats call k's request plus
call k's reply, plus the new turns. Calls are joined:

* by conversation id, when the log has one: a call joins the open conversation with its id, and must continue
  it (its request starts with everything so far); a call that does not is reported as `stitch_conflict`;
* otherwise by message prefix: a call joins the open conversation whose messages (so far) are the longest
  prefix of its request.

State is bounded: a conversation no call has extended within the last `window` lines is finished and emitted, so
at most `window` conversations are held, whatever the size of the file. A call that arrives later than that
starts a new conversation (its request still carries the whole history, so no turn is lost) and is flagged
`unstitched`, as is any first call whose request already holds assistant turns that no earlier call produced.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterator

from stateset_agents import Reject, Source
from stateset_agents.core.jsonio import canonical_json

from .messages import prefix_digests

DEFAULT_WINDOW = 1000


@dataclass
class Call:
    """One API call, already checked and converted to OpenAI-shaped messages."""

    key: str | None  # the conversation id the log gave, if any
    request: list[dict[str, Any]]
    reply: dict[str, Any]
    tools: list[Any]
    metadata: dict[str, Any]
    record: dict[str, Any]  # everything else about the call (model, parameters, usage, ...), kept in metadata


@dataclass
class _Conversation:
    number: int
    key: str | None
    unstitched: bool
    messages: list[dict[str, Any]] = field(default_factory=list)
    state: bytes = b""  # prefix digest of `messages`
    tools: dict[bytes, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    def extend(self, call: Call, state: bytes, tool_keys: list[bytes], line: int) -> None:
        self.messages = [*call.request, call.reply]
        self.state = state
        for key, tool in zip(tool_keys, call.tools):
            # The union of the schemas every call declared; a later definition of the same tool wins.
            self.tools[key] = tool
        self.metadata.update(call.metadata)
        self.calls.append(call.record)
        self.lines.append(line)

    def conversation(self, source: Source) -> dict[str, Any]:
        conv: dict[str, Any] = {"id": self.key} if self.key else {}
        conv["source"] = {"path": source.path, "sha256": source.sha256, "line": self.lines[-1],
                          "lines": self.lines, "unstitched": self.unstitched}
        conv.update(messages=self.messages, tools=list(self.tools.values()),
                    metadata={**self.metadata, "call_log": self.calls})
        return conv


def _tool_name(tool: Any) -> Any:
    function = tool.get("function") if isinstance(tool, dict) else None
    if isinstance(function, dict) and "name" in function:
        return function["name"]
    return tool.get("name", tool) if isinstance(tool, dict) else tool


class Stitcher:
    """Joins the calls of one file. `add` may yield a Reject; finished conversations come from `expire`/`finish`."""

    def __init__(self, source: Source, window: int = DEFAULT_WINDOW):
        self.source, self.window = source, window
        self._open: OrderedDict[int, _Conversation] = OrderedDict()  # least recently extended first
        self._by_key: dict[str, int] = {}
        self._by_state: dict[bytes, list[int]] = {}  # conversations without an id, by their prefix digest
        self._count = 0

    def add(self, call: Call, line: int) -> Iterator[Reject]:
        # Everything that can fail (a digest of JSON nested too deep to serialise) first, before any state changes.
        digests = prefix_digests([*call.request, call.reply])
        state, digests = digests[-1], digests[:-1]
        tool_keys = [canonical_json(_tool_name(tool)) for tool in call.tools]
        if call.key is not None:
            conv = self._open.get(self._by_key.get(call.key, -1))
            if conv is not None and not _continues(conv, digests):
                yield Reject(path=self.source.path, line=line, reason="stitch_conflict", field="request.messages",
                             detail=f"this call does not continue conversation {call.key!r} as logged up to line "
                                    f"{conv.lines[-1]} (its request does not start with those messages)")
                return
        else:
            conv = self._longest_prefix(digests)
        if conv is None:
            conv = self._start(call)
        elif call.key is None:
            self._unindex(conv)
        conv.extend(call, state, tool_keys, line)
        self._open.move_to_end(conv.number)
        if call.key is None:
            self._by_state.setdefault(conv.state, []).append(conv.number)

    def expire(self, line: int) -> Iterator[dict[str, Any]]:
        """Emit the conversations no call has extended within the window ending at `line`."""
        while self._open:
            conv = next(iter(self._open.values()))
            if conv.lines[-1] > line - self.window:
                break
            yield self._close(conv)

    def finish(self) -> Iterator[dict[str, Any]]:
        while self._open:
            yield self._close(next(iter(self._open.values())))

    def _start(self, call: Call) -> _Conversation:
        self._count += 1
        prior_turns = any(m["role"] == "assistant" for m in call.request)
        conv = _Conversation(number=self._count, key=call.key, unstitched=prior_turns)
        self._open[conv.number] = conv
        if call.key is not None:
            self._by_key[call.key] = conv.number
        return conv

    def _longest_prefix(self, digests: list[bytes]) -> _Conversation | None:
        for digest in reversed(digests):
            numbers = self._by_state.get(digest)
            if numbers:
                return self._open[numbers[0]]  # the earliest, when two conversations so far are identical
        return None

    def _unindex(self, conv: _Conversation) -> None:
        numbers = self._by_state.get(conv.state)
        if numbers is None:
            return
        numbers.remove(conv.number)
        if not numbers:
            del self._by_state[conv.state]

    def _close(self, conv: _Conversation) -> dict[str, Any]:
        del self._open[conv.number]
        if conv.key is None:
            self._unindex(conv)
        elif self._by_key.get(conv.key) == conv.number:
            del self._by_key[conv.key]
        return conv.conversation(self.source)


def _continues(conv: _Conversation, request_digests: list[bytes]) -> bool:
    n = len(conv.messages)
    return len(request_digests) >= n and request_digests[n - 1] == conv.state

