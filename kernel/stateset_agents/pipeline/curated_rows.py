"""The rows `improve run` writes besides the grades: curated prompt-completion rows and held-out prompts, the
held-out split, and the sinks that write them.

Rows are built as bytes: each message of a conversation is normalised and serialised once, and a row is the join
of those pieces. A conversation with k curated turns would otherwise have its prefix messages rebuilt and
re-serialised k times; the bytes are the same as `orjson.dumps` of the row dict (same keys, same order).
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
import unicodedata
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from ..core.errors import InputError
from ..core.jsonio import dumps
from ..plugin_api.splits import TEST, TRAIN, VALIDATION
from ..plugin_api.text import content_text

# ------------------------------------------------------------------------------------------- one message schema
#
# Arrow (hence `datasets`) needs one type per field across rows, so every curated message has the same keys and
# types: role str, content str, tool_calls list|None, tool_call_id str|None, name str|None; a tool call is
# {id: str, type: str, function: {name: str, arguments: str}}.


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _tool_call(call: Any) -> dict[str, Any]:
    call = call if isinstance(call, dict) else {}
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    args = fn.get("arguments")
    return {"id": str(call.get("id") or ""), "type": str(call.get("type") or "function"),
            "function": {"name": str(fn.get("name") or ""),
                         "arguments": args if isinstance(args, str) else dumps({} if args is None else args).decode()}}


def normalise_message(m: Mapping[str, Any]) -> dict[str, Any]:
    calls = m.get("tool_calls")
    return {"role": m["role"], "content": content_text(m.get("content")),
            "tool_calls": [_tool_call(c) for c in calls] if calls else None,
            "tool_call_id": _optional_str(m.get("tool_call_id")), "name": _optional_str(m.get("name"))}


def _message_bits(m: Mapping[str, Any]) -> int:
    """Which nullable fields (tool_calls, tool_call_id, name: bits 0-2) a normalised message fills."""
    return (m["tool_calls"] is not None) | (m["tool_call_id"] is not None) << 1 | (m["name"] is not None) << 2


_WIDTH = 3  # nullable fields a message has

# A plain message (text content, none of the nullable fields) as normalised JSON: a head by role, its content, a tail.
_ROLE_HEADS = {role: b'{"role":' + dumps(role) + b',"content":'
               for role in ("system", "developer", "user", "assistant", "tool")}
_PLAIN_TAIL = b',"tool_calls":null,"tool_call_id":null,"name":null}'


_NO_CALLS_ID = b',"tool_calls":null,"tool_call_id":'


def _plain_calls_json(calls: list) -> bytes | None:
    """`dumps` of the normalised calls where each is already in normal form (`_tool_call` of it changes nothing:
    exact dicts, non-empty string id, type and name, string arguments), else None."""
    plain = []
    for call in calls:
        fn = call.get("function") if call.__class__ is dict else None
        if fn.__class__ is not dict:
            return None
        call_id, kind, name, arguments = call.get("id"), call.get("type"), fn.get("name"), fn.get("arguments")
        if not (call_id and kind and name and call_id.__class__ is str and kind.__class__ is str
                and name.__class__ is str and arguments.__class__ is str):
            return None
        plain.append({"id": call_id, "type": kind, "function": {"name": name, "arguments": arguments}})
    return dumps(plain)


def _message_json(m: Mapping[str, Any]) -> tuple[bytes, int]:
    """`dumps(normalise_message(m))` and its `_message_bits`; a plain message, or a tool result that names its call
    (and tool) with strings, without building the dict."""
    head = _ROLE_HEADS.get(m["role"])
    content = m.get("content")
    calls = m.get("tool_calls")
    if (calls and head is not None and calls.__class__ is list and m.get("tool_call_id") is None
            and m.get("name") is None):
        calls_json = _plain_calls_json(calls)
        if calls_json is not None:  # the usual assistant message that calls tools
            return b"".join((head, dumps(content_text(content)), b',"tool_calls":', calls_json,
                             b',"tool_call_id":null,"name":null}')), 1
    if head is not None and content.__class__ is str and not calls:
        call_id, name = m.get("tool_call_id"), m.get("name")
        if call_id is None and name is None:
            return head + dumps(content) + _PLAIN_TAIL, 0
        if call_id.__class__ is str and (name is None or name.__class__ is str):
            return (b"".join((head, dumps(content), _NO_CALLS_ID, dumps(call_id), b',"name":',
                              b"null}" if name is None else dumps(name) + b"}")), 2 if name is None else 6)
    norm = normalise_message(m)
    return dumps(norm), _message_bits(norm)


# ------------------------------------------------------------------------------------------------ the split


# `improve run` assigns every conversation's *group* to one split role by a hash of the group key, so no group is
# on two sides: the key is the metadata's ``task_id`` or ``customer_id`` (the same grouping `improve calibrate` folds
# by), else the conversation's opening (the letters and digits of its first user message: two conversations that
# open alike always fall on one side, which keeps the held-out prompts clear of the training prompts).

#: Metadata keys that name a group (first found wins), as `improve calibrate` groups by.
GROUP_KEYS = ("task_id", "customer_id")


def group_key(conversation: Mapping[str, Any]) -> tuple[str, bytes]:
    """(what the group is, its key bytes): a metadata id when the conversation carries one, else its opening."""
    metadata = conversation.get("metadata") or {}
    for key in GROUP_KEYS:
        value = metadata.get(key) if isinstance(metadata, Mapping) else None
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) != "":
            return key, f"{key}={value}".encode()
    return "opening", split_key_bytes(conversation.get("messages") or [])


def role_of(key: bytes, fraction: float) -> str:
    """validation for the first `fraction` of the hash range, test for the next, train for the rest."""
    if fraction <= 0:
        return TRAIN
    u = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2 ** 64
    return VALIDATION if u < fraction else TEST if u < 2 * fraction else TRAIN


# Bytes that are not ASCII letters or digits: what `str.isalnum` drops from ASCII text.
_NOT_ALNUM = bytes(b for b in range(128) if not chr(b).isalnum())


def split_key_bytes(messages: list[Mapping[str, Any]]) -> bytes:
    for m in messages:
        if m.get("role") == "user":
            text = content_text(m.get("content"))
            if text.isascii():
                # NFKC leaves ASCII as it is and casefold is lower there: the same key, without a per-character
                # Python filter.
                return text.encode().lower().translate(None, _NOT_ALNUM)
            text = unicodedata.normalize("NFKC", text).casefold()
            return "".join(filter(str.isalnum, text)).encode()
    return b""


def split_key(messages: list[Mapping[str, Any]]) -> str:
    """What decides the held-out split: the letters and digits of the first user message, NFKC and case folded.
    That is coarser than the overlap check's normalising (`plugin_api.overlap.normalise_text`: case folded,
    punctuation dropped, whitespace collapsed), so two prompts it calls equal always fall on the same side; and it
    is C-speed."""
    return split_key_bytes(messages).decode()


def is_held_out(messages: list[Mapping[str, Any]], fraction: float) -> bool:
    if fraction <= 0:
        return False
    return int.from_bytes(hashlib.sha256(split_key_bytes(messages)).digest()[:8], "big") < fraction * 2 ** 64


# ------------------------------------------------------------------------------------------------ the rows


_last_tools: tuple[bytes, bytes] = (b"[]", b'"[]"')


def _tools_text(tools_json: bytes) -> bytes:
    """The tools' JSON as a JSON string. Consecutive conversations of a log mostly declare the same tools, so the
    last answer is kept (one tuple, replaced whole: safe across threads)."""
    global _last_tools
    known, text = _last_tools
    if tools_json != known:
        text = dumps(tools_json.decode())
        _last_tools = (tools_json, text)
    return text


class Conversation:
    """One input conversation, with its rows' pieces (each message's JSON, tools, metadata, lineage) built once,
    on first use."""

    __slots__ = ("data", "line", "turns", "role", "group", "_messages", "_bits", "_prefix_bits", "_suffix_bits", "_tools",
                 "_tools_text", "_metadata", "_metadata_text", "_lineage")

    def __init__(self, data: dict[str, Any], line: int, turns: list[int], role: str = "train", group: str = ""):
        self.data, self.line, self.turns, self.role, self.group = data, line, turns, role, group
        self._messages: list[bytes] | None = None

    @property
    def held_out(self) -> bool:
        return self.role != "train"

    def _build(self, source_path: str, source_sha256: Future) -> None:
        try:
            self._build_pieces(source_path, source_sha256)
        except TypeError as exc:  # orjson: valid JSON read (up to 1024 levels) nested deeper than it writes (254)
            self._messages = None
            raise InputError(f"conversation {self.data['id']!r} nests too deeply to be written as rows ({exc})",
                             path=source_path, line=self.line) from None

    def _build_pieces(self, source_path: str, source_sha256: Future) -> None:
        self._messages, self._bits = [], []
        for m in self.data["messages"]:
            data, bits = _message_json(m)
            self._messages.append(data)
            self._bits.append(bits)
        bits = self._bits
        filled, self._prefix_bits = 0, []
        for b in bits:
            self._prefix_bits.append(filled)  # what the messages before turn i fill
            filled |= b
        filled, self._suffix_bits = 0, [0] * len(bits)
        for i in range(len(bits) - 1, -1, -1):
            self._suffix_bits[i] = filled  # what the messages after turn i fill
            filled |= bits[i]
        # Arrow cannot hold arbitrary JSON (tool schemas, metadata) in one column type; TRL parses `tools` text.
        self._tools = dumps(self.data.get("tools") or [])
        self._metadata = dumps(self.data.get("metadata") or {})
        self._tools_text, self._metadata_text = _tools_text(self._tools), dumps(self._metadata.decode())
        src = self.data.get("source") or {}
        line = src.get("line")
        lineage = {"conversation_id": self.data["id"], "source_path": str(src.get("path") or source_path),
                   "source_sha256": str(src.get("sha256") or source_sha256.result()),
                   "line": line if isinstance(line, int) and not isinstance(line, bool) else self.line}
        self._lineage = dumps(lineage)[:-1] + b',"turn_index":'  # the turn index closes it

    def curated_line(self, turn: int, score: float, source: tuple[str, Future]) -> tuple[bytes, int]:
        """The training row for `turn` as a JSONL line, and which nullable fields it fills (prompt: bits 0-2,
        completion: 3-5, continuation: 6-8). The row: `prompt` (the messages before the turn), `completion` (the
        turn), `continuation` (the recorded rest of the conversation, which multi-turn training replays: user turns,
        tool results; single-turn trainers and TRL ignore it), `tools` and `metadata` as JSON text, `score`,
        `lineage`, `split` ("train")."""
        if self._messages is None:
            self._build(*source)
        msgs = self._messages
        line = b"".join((b'{"prompt":[', b",".join(msgs[:turn]), b'],"completion":[', msgs[turn],
                         b'],"continuation":[', b",".join(msgs[turn + 1:]), b'],"tools":', self._tools_text,
                         b',"score":', dumps(score), b',"metadata":', self._metadata_text, b',"lineage":',
                         self._lineage, b'%d},"split":"train"}\n' % turn))
        return line, (self._prefix_bits[turn] | self._bits[turn] << _WIDTH
                      | self._suffix_bits[turn] << 2 * _WIDTH)

    def held_out_line(self, turn: int, source: tuple[str, Future]) -> bytes:
        """The evaluation prompt `{"id", "split", "group", "prompt", "tools", "metadata", "lineage"}` for `turn`,
        as a JSONL line; `split` is the conversation's role (validation or test), `group` what decided it."""
        if self._messages is None:
            self._build(*source)
        return b"".join((b'{"id":', dumps(f"{self.data['id']}#{turn}"), b',"split":', dumps(self.role),
                         b',"group":', dumps(self.group), b',"prompt":[',
                         b",".join(self._messages[:turn]), b'],"tools":', self._tools, b',"metadata":',
                         self._metadata, b',"lineage":', self._lineage, b"%d}}\n" % turn))


# ------------------------------------------------------------------------------------------------------ sinks


class Sink:
    """A binary output that keeps the sha256, size and row count of what it was given. Rows arrive a batch at a
    time: one write per batch keeps the per-row cost (and, beside a gRPC reward, GIL hand-offs) down."""

    def __init__(self, f: IO[bytes]):
        self.f, self.sha, self.bytes, self.rows = f, hashlib.sha256(), 0, 0
        self.pending: list[bytes] = []
        self.pending_rows = 0

    def add(self, lines: bytes, rows: int = 1) -> None:
        self.pending.append(lines)
        self.pending_rows += rows

    def flush(self) -> None:
        if self.pending:
            self._write(b"".join(self.pending), self.pending_rows)
            self.pending, self.pending_rows = [], 0

    def _write(self, data: bytes, rows: int) -> None:
        self.f.write(data)
        self.sha.update(data)
        self.bytes += len(data)
        self.rows += rows

    def describe(self) -> dict[str, Any]:
        return {"sha256": self.sha.hexdigest(), "bytes": self.bytes, "rows": self.rows}


class CuratedSink(Sink):
    """Curated rows in input order, except that a row filling a nullable field that no earlier row filled, when it
    comes after the first MiB of the file, moves to the head. `datasets` infers the schema from the file's first chunk
    (10 MiB unless told otherwise) and casts later chunks to it, so a field null throughout that chunk (no tool call
    yet) would make a later chunk fail to load. The move rewrites the file once, at the end, and only then."""

    EARLY_BYTES = 1 << 20

    def __init__(self, f: IO[bytes], spill_dir: Path):
        super().__init__(f)
        self.spill_dir, self.seen, self.late, self.pending_bytes = spill_dir, 0, [], 0

    def add_line(self, line: bytes, bits: int) -> None:
        if bits & ~self.seen and self.bytes + self.pending_bytes > self.EARLY_BYTES:
            self.late.append(line)
        else:
            self.add(line)
            self.pending_bytes += len(line)
        self.seen |= bits

    def flush(self) -> None:
        super().flush()
        self.pending_bytes = 0

    def finish(self) -> None:
        self.flush()
        if not self.late:
            return
        body, rows = self.f, self.rows
        with tempfile.TemporaryFile(dir=self.spill_dir) as spill:
            body.seek(0)
            shutil.copyfileobj(body, spill, 1 << 20)
            body.seek(0)
            body.truncate()
            self.sha, self.bytes, self.rows = hashlib.sha256(), 0, 0
            self._write(b"".join(self.late), len(self.late))
            spill.seek(0)
            while block := spill.read(1 << 20):
                self._write(block, 0)
        self.rows = rows + len(self.late)
