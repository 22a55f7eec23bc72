"""Conversation capture: every served call appended, as one line of the call-log form ingest reads, so
`stateset-agents ingest --format <the OpenAI log ingestor> --input CAPTURE_DIR` takes the directory as it is.

A line is ``{"conversation_id"?, "request": {"model", "messages", "tools"?, sampling fields...}, "response":
{"choices": [{"index", "message", "finish_reason"}], "usage"}}``: messages OpenAI-shaped (a Messages API call is
captured in its OpenAI form), nothing else (no time stamps, no generated ids), so the same calls logged by a client
are the same bytes. Ingest stitches the calls of a conversation by ``conversation_id`` (the client's
``x-conversation-id`` header or ``metadata.conversation_id``), else by message prefix.

Files: ``CAPTURE_DIR/OWNER-NNNNNN.jsonl``, one series per key owner (what a key may read back). Each line is
written whole, flushed and fsynced before the response is sent (durable per call, so per conversation turn).
A file past ``max_bytes`` takes no new conversation; the next file does. A conversation stays in the file its first
call went to (ingest stitches within a file), so a file may end somewhat past ``max_bytes``; after a restart a
continuing conversation starts in the newest file and ingest keeps it whole from its request, flagged unstitched.

Redaction (on unless the server runs with --capture-raw) is ingest's `--redact` rules, applied to the request's
messages and the reply of each call before it is written: the placeholders are numbered per call in order of first
appearance, so a call that repeats an earlier call's messages redacts them to the same text and prefix stitching
still joins them.
"""
from __future__ import annotations

import collections
import copy
import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import InputError
from ..core.jsonio import canonical_json, dumps_line
from ..pipeline.redact import redact_conversation

DEFAULT_MAX_BYTES = 64 << 20
_FILE = re.compile(r"^(?P<owner>[A-Za-z0-9][A-Za-z0-9_.-]*)-(?P<seq>\d{6})\.jsonl$")
_REMEMBERED = 100_000  # conversations whose file is remembered (least recently continued forgotten first)


def _chain(messages) -> list[bytes]:
    """Digest of each message prefix: [d(m1), d(m1, m2), ...]."""
    out, state = [], b""
    for m in messages:
        state = hashlib.blake2b(state + canonical_json(m), digest_size=16).digest()
        out.append(state)
    return out


class Capture:
    def __init__(self, directory: str | os.PathLike, *, redact: bool = True, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory, self.redact, self.max_bytes = Path(directory), redact, int(max_bytes)
        if self.directory.exists() and not self.directory.is_dir():
            raise InputError("the capture path is not a directory", path=str(self.directory))
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._current: dict[str, Path] = {}
        self._where: collections.OrderedDict[tuple[str, Any], Path] = collections.OrderedDict()

    def files(self, owner: str | None = None) -> list[dict[str, Any]]:
        """The capture files (of `owner`, or all), oldest first."""
        rows = []
        for path in sorted(self.directory.iterdir()):
            match = _FILE.match(path.name)
            if match and path.is_file() and not path.is_symlink() and (owner is None or match["owner"] == owner):
                rows.append({"file": path.name, "owner": match["owner"], "bytes": path.stat().st_size})
        return rows

    def path_of(self, name: str, owner: str | None) -> Path | None:
        """The capture file `name` when `owner` (None: any) may read it, else None."""
        match = _FILE.match(name)
        if not match or (owner is not None and match["owner"] != owner):
            return None
        path = self.directory / name
        # a symlink planted in the directory would serve whatever it points at: only plain files are captures
        return path if path.is_file() and not path.is_symlink() else None

    def record(self, owner: str, conversation_id: str | None, request: Mapping[str, Any],
               choices: list[dict[str, Any]], usage: Mapping[str, Any]) -> Path:
        """Append one call; returns the file it went to."""
        return self.record_at(owner, conversation_id, request, choices, usage)[0]

    def record_at(self, owner: str, conversation_id: str | None, request: Mapping[str, Any],
                  choices: list[dict[str, Any]], usage: Mapping[str, Any]) -> tuple[Path, int, int]:
        """Append one call; (the file, the line's byte offset, its length): what the conversation index keeps."""
        request = copy.deepcopy(dict(request))
        choices = copy.deepcopy(choices)
        if self.redact:
            for choice in choices:
                # one conversation per choice, as ingest redacts it: the request's messages and this reply
                conversation = {"messages": [*request["messages"], choice["message"]]}
                redact_conversation(conversation)
                choice["message"] = conversation["messages"][-1]
            conversation = {"messages": request["messages"]}
            redact_conversation(conversation)
            request["messages"] = conversation["messages"]
        line: dict[str, Any] = {"conversation_id": conversation_id} if conversation_id else {}
        line.update(request=request, response={"choices": choices, "usage": dict(usage)})
        data = dumps_line(line)
        digests = _chain(request["messages"])
        with self._lock:
            path = self._file_for(owner, conversation_id, digests)
            # never through a symlink (O_NOFOLLOW: one planted here fails the call, it is not written through)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            with open(fd, "ab") as f:
                offset = f.seek(0, os.SEEK_END)
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            reply_state = _chain([*request["messages"], choices[0]["message"]])[-1]
            self._remember((owner, conversation_id or reply_state), path)
        return path, offset, len(data)

    def _file_for(self, owner: str, conversation_id: str | None, digests: list[bytes]) -> Path:
        if conversation_id:
            known = self._where.get((owner, conversation_id))
            if known is not None:
                return known
        else:
            for digest in reversed(digests):  # the longest prefix that ended an earlier call's reply
                known = self._where.pop((owner, digest), None)
                if known is not None:
                    return known
        return self._open_file(owner)

    def _remember(self, key: tuple[str, Any], path: Path) -> None:
        self._where[key] = path
        self._where.move_to_end(key)
        while len(self._where) > _REMEMBERED:
            self._where.popitem(last=False)

    def _open_file(self, owner: str) -> Path:
        path = self._current.get(owner)
        if path is None:
            mine = self.files(owner)
            path = self.directory / (mine[-1]["file"] if mine else f"{owner}-000001.jsonl")
        if path.exists() and path.stat().st_size >= self.max_bytes:
            seq = int(_FILE.match(path.name)["seq"]) + 1
            path = self.directory / f"{owner}-{seq:06d}.jsonl"
        self._current[owner] = path
        return path
