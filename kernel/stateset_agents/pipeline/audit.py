"""`improve audit`: does the reward track a label you trust?

Inputs: `graded.jsonl` from `improve run`, and labels, either a file of `{"id", "label"}` lines or a key of each
conversation's metadata in `transcripts.jsonl`. A conversation's score is the mean (or, with `rollup="min"`, the
minimum) of its applicable turns; conversations without an applicable turn or without a label are counted and left
out. Labels may be booleans or numbers: numbers are positives above 0.5 (use labels in [0, 1], e.g. 1.0 solved),
and Spearman uses them as they are.

Reported: ROC AUC with a bootstrap interval, Spearman rank correlation, the confusion table at the curation
threshold, the AUC of a length-only baseline (number of messages) to beat, and the conversations where the reward and
the label disagree most (|score - label|, the label clipped to [0, 1]).
"""
from __future__ import annotations

import math
import os
from typing import Any

from ..core.errors import InputError
from ..core.jsonio import read_jsonl
from ..plugin_api.stats import bootstrap_auc_interval, confusion_table, roc_auc, spearman
from .improve import DEFAULT_THRESHOLD, transcripts_path

ROLLUPS = ("mean", "min")
BINARISE_AT = 0.5


class _Graded:
    """One conversation's grades, aggregated as they stream by."""

    __slots__ = ("total", "applicable", "low", "low_turn", "low_reason", "turns", "last_turn")

    def __init__(self):
        self.total, self.applicable, self.low, self.turns, self.last_turn = 0.0, 0, math.inf, 0, -1
        self.low_turn, self.low_reason = None, ""

    def score(self, rollup: str) -> float:
        return self.low if rollup == "min" else self.total / self.applicable


def _check_grade_row(row: Any, shown: str, line: int) -> tuple[str, int, float, bool]:
    def bad(message: str, field: str | None = None):
        return InputError(message, path=shown, line=line, field=field)

    if not isinstance(row, dict):
        raise bad("expected a grade row (a JSON object)")
    cid, turn, score, applicable = (row.get(k) for k in ("conversation_id", "turn_index", "score", "applicable"))
    if not isinstance(cid, str) or not cid:
        raise bad("missing conversation id", "conversation_id")
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
        raise bad("expected a turn index (an integer from 0)", "turn_index")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
        raise bad("expected a score in [0, 1]", "score")
    if not isinstance(applicable, bool):
        raise bad("expected true or false", "applicable")
    return cid, turn, float(score), applicable


def read_grades(path: str | os.PathLike) -> dict[str, _Graded]:
    shown = str(path)
    grades: dict[str, _Graded] = {}
    for line, row in read_jsonl(path, display=shown):
        cid, turn, score, applicable = _check_grade_row(row, shown, line)
        g = grades.get(cid)
        if g is None:
            g = grades[cid] = _Graded()
        g.turns += 1
        g.last_turn = max(g.last_turn, turn)
        if applicable:
            g.total += score
            g.applicable += 1
            if score < g.low:
                g.low, g.low_turn, g.low_reason = score, turn, str(row.get("reason") or "")
    if not grades:
        raise InputError("no grade rows in this file", path=shown)
    return grades


def _label_value(value: Any, where: dict[str, Any]) -> float | bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    raise InputError(f"expected a boolean or a number, got {value!r}", **where)


def read_label_file(path: str | os.PathLike) -> dict[str, float | bool]:
    shown = str(path)
    labels: dict[str, float | bool] = {}
    for line, row in read_jsonl(path, display=shown):
        if not isinstance(row, dict):
            raise InputError('expected {"id": ..., "label": ...}', path=shown, line=line)
        cid = row.get("id")
        if isinstance(cid, bool) or not isinstance(cid, (str, int)) or cid == "":
            raise InputError("missing or invalid id", path=shown, line=line, field="id")
        if str(cid) in labels:
            raise InputError(f"label for {cid!r} given twice", path=shown, line=line, field="id")
        if "label" not in row:
            raise InputError("missing label", path=shown, line=line, field="label")
        labels[str(cid)] = _label_value(row["label"], {"path": shown, "line": line, "field": "label"})
    if not labels:
        raise InputError("no labels in this file", path=shown)
    return labels


def read_label_key(transcripts: str | os.PathLike, key: str) -> tuple[dict[str, float | bool], dict[str, int]]:
    """Labels from `metadata[key]` of each conversation, and each conversation's number of messages."""
    src = transcripts_path(transcripts)
    shown = str(src)
    labels: dict[str, float | bool] = {}
    lengths: dict[str, int] = {}
    for line, conv in read_jsonl(src, display=shown):
        if not isinstance(conv, dict) or not isinstance(conv.get("id"), (str, int)):
            raise InputError("expected a conversation with an id", path=shown, line=line, field="id")
        cid = str(conv["id"])
        messages = conv.get("messages")
        lengths[cid] = len(messages) if isinstance(messages, list) else 0
        metadata = conv.get("metadata") or {}
        if isinstance(metadata, dict) and metadata.get(key) is not None:
            labels[cid] = _label_value(metadata[key], {"path": shown, "line": line, "field": f"metadata.{key}"})
    if not labels:
        raise InputError(f"no conversation has a {key!r} label in its metadata", path=shown, field=f"metadata.{key}")
    return labels, lengths


def run_audit(graded: str | os.PathLike, *, labels: str | os.PathLike | None = None,
              transcripts: str | os.PathLike | None = None, label_key: str | None = None, rollup: str = "mean",
              threshold: float = DEFAULT_THRESHOLD, top: int = 10, draws: int = 2000, seed: int = 0) -> dict[str, Any]:
    if rollup not in ROLLUPS:
        raise InputError(f"rollup must be one of {', '.join(ROLLUPS)}, got {rollup!r}", field="rollup")
    if (labels is None) == (transcripts is None) or (transcripts is not None and not label_key):
        raise InputError("give labels either as --labels FILE or as --transcripts DIR --label-key KEY",
                         field="labels")
    grades = read_grades(graded)
    if labels is not None:
        label_of = read_label_file(labels)
        lengths, measure = {}, "messages through the last graded turn"
        label_source = {"from": "file", "path": str(labels)}
    else:
        label_of, lengths = read_label_key(transcripts, label_key)
        measure = "messages"
        label_source = {"from": "transcripts", "path": str(transcripts_path(transcripts)), "key": label_key}

    ids = sorted(cid for cid, g in grades.items() if g.applicable and cid in label_of)
    scores = [grades[cid].score(rollup) for cid in ids]
    values = [label_of[cid] for cid in ids]
    numeric = [float(v) for v in values]
    positives = [v if isinstance(v, bool) else v > BINARISE_AT for v in values]
    length = [float(lengths.get(cid, grades[cid].last_turn + 1)) for cid in ids]
    both_classes = any(positives) and not all(positives)

    report: dict[str, Any] = {
        "graded": str(graded), "labels": label_source, "rollup": rollup, "threshold": threshold,
        "label_type": "bool" if all(isinstance(v, bool) for v in values) else "numeric",
        "positive_if": f"label is true, or a number > {BINARISE_AT}",
        "counts": {
            "graded_conversations": len(grades),
            "no_applicable_turn": sum(1 for g in grades.values() if not g.applicable),
            "unlabelled": sum(1 for cid, g in grades.items() if g.applicable and cid not in label_of),
            "labels_without_grades": sum(1 for cid in label_of if cid not in grades),
            "matched": len(ids), "positives": sum(positives), "negatives": len(ids) - sum(positives),
        },
        "auc": {"value": None, "interval": None, "level": 0.95, "draws": draws},
        "spearman": None,
        "confusion": confusion_table(scores, positives, threshold),
        "length_baseline": {"measure": measure, "auc": None},
        "notes": [],
    }
    if both_classes:
        report["auc"]["value"] = roc_auc(scores, positives)
        if draws > 0:
            report["auc"]["interval"] = list(bootstrap_auc_interval(scores, positives, draws=draws, seed=seed))
        report["length_baseline"]["auc"] = roc_auc(length, positives)
    else:
        report["notes"].append("AUC needs both a positive and a negative label among the matched conversations")
    if len(ids) >= 2:
        rho = spearman(scores, numeric)
        report["spearman"] = None if math.isnan(rho) else rho
    if not ids:
        report["notes"].append("no conversation has both an applicable graded turn and a label: check the ids match")

    # Rounded so float noise (1 - 0.8 != 0.2) does not decide the order; ties go by id.
    gaps = sorted(((round(abs(s - min(max(v, 0.0), 1.0)), 9), cid, s) for cid, s, v in zip(ids, scores, numeric)),
                  key=lambda t: (-t[0], t[1]))
    report["disagreements"] = [
        {"conversation_id": cid, "score": s, "label": label_of[cid], "gap": gap,
         "applicable_turns": grades[cid].applicable, "lowest_turn": grades[cid].low_turn,
         "lowest_reason": grades[cid].low_reason}
        for gap, cid, s in gaps[:top]]
    return report
