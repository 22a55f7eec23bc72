"""Split isolation: a training row whose prompt is also a held-out case makes the held-out score meaningless.

A prompt is compared by its conversational part: the non-system messages (role, text, tool calls), since system
prompts are shared boilerplate that would make every pair look different. Two prompts collide when that part is
equal exactly, or after normalising: case folded, punctuation removed, whitespace collapsed.

`train` refuses colliding rows (or drops them with --drop-overlap, recording which in the manifest); `evaluate`
refuses colliding cases (or drops the cases with --drop-overlap, recording which in eval_results.json).
"""
from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from ..core.errors import InputError
from ..core.jsonio import canonical_json
from .text import content_text

#: Collisions listed in an error message before "... and N more".
SHOWN_IN_ERROR = 10


def _tool_calls_text(message: Mapping[str, Any]) -> str:
    parts = []
    for call in message.get("tool_calls") or ():
        fn = (call.get("function") if isinstance(call, Mapping) else None) or {}
        args = fn.get("arguments")
        if isinstance(args, str):  # compare arguments as parsed JSON, so spacing and key order do not matter
            try:
                import orjson

                args = orjson.loads(args)
            except ValueError:
                pass
        parts.append(canonical_json({"name": fn.get("name"), "arguments": args}).decode())
    return " ".join(parts)


def _prompt_messages(prompt: Any) -> list[Mapping[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [m for m in prompt or () if isinstance(m, Mapping) and m.get("role") != "system"]


def exact_key(prompt: Any) -> str:
    """The conversational part of a prompt, verbatim."""
    return canonical_json([[m.get("role"), content_text(m.get("content")), _tool_calls_text(m)]
                           for m in _prompt_messages(prompt)]).decode()


def normalise_text(text: str) -> str:
    """Case folded, punctuation (Unicode category P*) removed, whitespace collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    kept = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in folded)
    return " ".join(kept.split())


def normalised_key(prompt: Any) -> str:
    return "\n".join(f"{m.get('role')}: {normalise_text(content_text(m.get('content')) + ' ' + _tool_calls_text(m))}"
                     for m in _prompt_messages(prompt))


@dataclass
class Overlap:
    """One training row whose prompt equals a held-out case's."""

    row_index: int  # position in the dataset (0-based)
    dataset_line: int | None  # line in the dataset file (from 1), when known
    row_id: str | None
    case_id: str
    match: str  # "exact" or "normalised"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        where = f"line {self.dataset_line}" if self.dataset_line is not None else f"row {self.row_index + 1}"
        return f"{where} (row {self.row_id!r}) matches held-out case {self.case_id!r} ({self.match})"


def find_overlaps(train_rows: Sequence[Mapping[str, Any]], cases: Sequence[Mapping[str, Any]]) -> list[Overlap]:
    """Every (training row, held-out case) pair whose prompts collide. Rows carry `prompt` (messages), optionally
    `_line` (dataset line) and `id`; cases carry `prompt` (messages or text) and `id`."""
    exact: dict[str, str] = {}
    normalised: dict[str, str] = {}
    for i, case in enumerate(cases):
        case_id = str(case.get("id", f"case{i + 1}"))
        exact.setdefault(exact_key(case.get("prompt")), case_id)
        normalised.setdefault(normalised_key(case.get("prompt")), case_id)
    found = []
    for i, row in enumerate(train_rows):
        prompt = row.get("prompt")
        if prompt is None and isinstance(row.get("messages"), list):  # a raw conversation row: up to its answer
            msgs = row["messages"]
            first = next((k for k, m in enumerate(msgs) if m.get("role") == "assistant"), len(msgs))
            prompt = msgs[:first]
        hit, how = exact.get(exact_key(prompt)), "exact"
        if hit is None:
            hit, how = normalised.get(normalised_key(prompt)), "normalised"
        if hit is not None:
            row_id = row.get("id", (row.get("lineage") or {}).get("conversation_id"))
            found.append(Overlap(i, row.get("_line"), None if row_id is None else str(row_id), hit, how))
    return found


def _refusal(overlaps: Sequence[Overlap], what: str) -> str:
    shown = "; ".join(o.describe() for o in overlaps[:SHOWN_IN_ERROR])
    more = f"; ... and {len(overlaps) - SHOWN_IN_ERROR} more" if len(overlaps) > SHOWN_IN_ERROR else ""
    return (f"{len(overlaps)} training row(s) have a prompt that is also a held-out case: {shown}{more}. "
            f"Remove them, or pass --drop-overlap to drop the {what}")


def isolate_training_rows(train_rows: Sequence[Mapping[str, Any]], cases: Sequence[Mapping[str, Any]], *,
                          drop: bool, dataset_path: str | None = None
                          ) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """Before training: refuse (InputError naming the dataset) or drop rows colliding with held-out cases.
    Returns the rows to train on and the record for the manifest's `split_isolation`."""
    overlaps = find_overlaps(train_rows, cases)
    if overlaps and not drop:
        raise InputError(_refusal(overlaps, "overlapping training rows"), path=dataset_path)
    dropped = {o.row_index for o in overlaps}
    kept = [row for i, row in enumerate(train_rows) if i not in dropped]
    if not kept:
        raise InputError("every training row overlaps a held-out case; nothing is left to train on",
                         path=dataset_path)
    policy = "drop" if drop else "refuse"
    return kept, {"checked": True, "held_out_cases": len(cases), "rows_checked": len(train_rows), "policy": policy,
                  "dropped_rows": [o.as_dict() for o in overlaps]}


def isolate_cases(train_rows: Sequence[Mapping[str, Any]], cases: Sequence[Mapping[str, Any]], *, drop: bool,
                  dataset_path: str | None = None) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """Before evaluation: the model already trained on those rows, so with `drop` the colliding *cases* leave the
    evaluation instead. Returns the cases to evaluate and the record for eval_results.json."""
    overlaps = find_overlaps(train_rows, cases)
    if overlaps and not drop:
        raise InputError(_refusal(overlaps, "overlapping held-out cases from the evaluation"), path=dataset_path)
    gone = {o.case_id for o in overlaps}
    kept = [c for c in cases if str(c.get("id")) not in gone]
    if not kept:
        raise InputError("every held-out case overlaps the training data; nothing is left to evaluate",
                         path=dataset_path)
    policy = "drop" if drop else "refuse"
    return kept, {"checked": True, "dataset": dataset_path, "rows_checked": len(train_rows), "policy": policy,
                  "dropped_cases": sorted(gone), "collisions": [o.as_dict() for o in overlaps]}
