"""The three split roles: train, validation (checkpoint selection), test (a nominated checkpoint, looked at once).

`improve run` assigns every conversation's *group* to one role by a hash of the group key, so no group is on two
sides: the key is the metadata's ``task_id`` or ``customer_id`` (the same grouping `improve calibrate` folds by),
else the conversation's opening (the letters and digits of its first user message: two conversations that open
alike always fall on one side, which keeps the held-out prompts clear of the training prompts). Every row of
`validation.jsonl` and `test.jsonl` records its role (``"split": "validation"``); `curated.jsonl` rows record
``"split": "train"``.

The training loader refuses a file whose rows record an evaluation role (`refuse_evaluation_rows`), everywhere
training rows are read: local `train`, `train-remote`'s dataset check, the Python trainers.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

import orjson

from ..errors import InputError
from .curated_rows import split_key_bytes

TRAIN, VALIDATION, TEST = "train", "validation", "test"
EVALUATION_ROLES = (VALIDATION, TEST)
#: Metadata keys that name a group (first found wins), as `improve calibrate` groups by.
GROUP_KEYS = ("task_id", "customer_id")
#: The file each evaluation role is written to, beside curated.jsonl.
SPLIT_FILES = {VALIDATION: "validation.jsonl", TEST: "test.jsonl"}
#: What an improve folder of summary schema 1 wrote: one held-out file of no recorded role.
LEGACY_HELD_OUT = "held_out.jsonl"


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


def _split_of_line(raw: bytes) -> Any:
    if b'"split"' not in raw:  # the common case (a curated row says "train"; older rows say nothing): no parse
        return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return obj.get("split") if isinstance(obj, dict) else None


def refusal(role: str, where: str, line: int | None = None) -> InputError:
    return InputError(f"this is a {role} file (its rows say split: {role}): training never reads validation or "
                      "test rows. Train on curated.jsonl; the validation file goes to --eval-prompts (checkpoint "
                      "selection), the test file to `evaluate --split test` after `nominate`", path=where,
                      line=line, field="split")


def refuse_evaluation_row(row: Mapping[str, Any], where: str, line: int | None = None) -> None:
    role = row.get("split")
    if role in EVALUATION_ROLES:
        raise refusal(role, where, line)


def refuse_evaluation_file(path: str | os.PathLike) -> None:
    """Refuse a training file that holds validation or test rows (scanning every line: a split file is small,
    and the scan parses only lines that mention a split)."""
    p = Path(path)
    if not p.is_file():
        return  # the caller reports a missing file in its own words
    opener = __import__("gzip").open if p.suffix == ".gz" else open
    with opener(p, "rb") as f:
        for number, raw in enumerate(f, start=1):
            role = _split_of_line(raw)
            if role in EVALUATION_ROLES:
                raise refusal(role, str(path), number)


def file_role(path: str | os.PathLike) -> str | None:
    """The role a prompts file's rows record (validation, test), or None (a .txt file, rows of no role)."""
    p = Path(path)
    if not str(p).endswith((".jsonl", ".jsonl.gz")) or not p.is_file():
        return None
    opener = __import__("gzip").open if p.suffix == ".gz" else open
    roles = set()
    with opener(p, "rb") as f:
        for raw in f:
            if raw.strip():
                roles.add(_split_of_line(raw))
    if len(roles) > 1:
        raise InputError("rows of different split roles in one file: an evaluation file holds one role",
                         path=str(path), field="split")
    return next(iter(roles), None)
