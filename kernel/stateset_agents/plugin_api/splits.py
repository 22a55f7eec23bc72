"""The three split roles: train, validation (checkpoint selection), test (a nominated checkpoint, looked at once).

`improve run` assigns every conversation's group to one role (`pipeline.curated_rows.group_key` and `role_of`), so
no group is on two sides. Every row of `validation.jsonl` and `test.jsonl` records its role (``"split":
"validation"``); `curated.jsonl` rows record ``"split": "train"``.

The training loader refuses a file whose rows record an evaluation role (`refuse_evaluation_row`,
`refuse_evaluation_file`), everywhere training rows are read: local `train`, `train-remote`'s dataset check, the
Python trainers, and a third party's trainer through `datasets.load_dataset`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import orjson

from ..core.errors import InputError

TRAIN, VALIDATION, TEST = "train", "validation", "test"
EVALUATION_ROLES = (VALIDATION, TEST)
#: The file each evaluation role is written to, beside curated.jsonl.
SPLIT_FILES = {VALIDATION: "validation.jsonl", TEST: "test.jsonl"}
#: What an improve folder of summary schema 1 wrote: one held-out file of no recorded role.
LEGACY_HELD_OUT = "held_out.jsonl"


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
