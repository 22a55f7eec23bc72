"""`improve audit`: how well a reward tracks a label, checked on small cases worked out by hand."""
from __future__ import annotations

import json
import math

import orjson
import pytest

from stateset_agents.cli import main
from tests.improve.improve_helpers import chat, write_transcripts


def write_lines(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def grade(cid, turn, score, applicable=True, reason=""):
    return {"conversation_id": cid, "turn_index": turn, "score": score, "applicable": applicable,
            "breakdown": {}, "reason": reason or f"{cid} turn {turn}", "reward": {"name": "toy"}}


@pytest.fixture
def case(tmp_path):
    graded = write_lines(tmp_path / "graded.jsonl", [
        grade("a", 2, 0.9), grade("a", 4, 0.7),
        grade("b", 2, 0.2),
        grade("c", 2, 0.6, reason="c is weak here"), grade("c", 4, 1.0),
        grade("d", 2, 0.0, applicable=False),
        grade("e", 2, 0.95),
        grade("f", 2, 0.5),
    ])
    labels = write_lines(tmp_path / "labels.jsonl", [
        {"id": "a", "label": True}, {"id": "b", "label": False}, {"id": "c", "label": False},
        {"id": "d", "label": True}, {"id": "e", "label": True}, {"id": "g", "label": True}])
    return graded, labels


def audit(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["improve", "audit", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_auc_spearman_confusion_baseline_and_disagreements(case, capsys):
    graded, labels = case
    report = audit(capsys, "--graded", str(graded), "--labels", str(labels))
    # Matched: a 0.8 (+), b 0.2 (-), c 0.8 (-), e 0.95 (+); d has no applicable turn, f no label, g no grades.
    assert report["counts"] == {"graded_conversations": 6, "no_applicable_turn": 1, "unlabelled": 1,
                                "labels_without_grades": 1, "matched": 4, "positives": 2, "negatives": 2}
    assert report["auc"]["value"] == pytest.approx(3.5 / 4)  # one tied positive-negative pair counts a half
    lo, hi = report["auc"]["interval"]
    assert 0.0 <= lo <= report["auc"]["value"] <= hi <= 1.0
    assert report["spearman"] == pytest.approx(3 / math.sqrt(18))
    assert {k: report["confusion"][k] for k in ("tp", "fp", "fn", "tn")} == {"tp": 2, "fp": 1, "fn": 0, "tn": 1}
    assert report["confusion"]["precision"] == pytest.approx(2 / 3)
    # Lengths (messages through the last graded turn): a 5, b 3, c 5, e 3: no signal at all.
    assert report["length_baseline"] == {"measure": "messages through the last graded turn", "auc": 0.5}
    assert [d["conversation_id"] for d in report["disagreements"]] == ["c", "a", "b", "e"]
    assert report["disagreements"][0] == {"conversation_id": "c", "score": 0.8, "label": False, "gap": 0.8,
                                          "applicable_turns": 2, "lowest_turn": 2, "lowest_reason": "c is weak here"}
    assert report["label_type"] == "bool"


def test_min_rollup_and_threshold(case, capsys):
    graded, labels = case
    report = audit(capsys, "--graded", str(graded), "--labels", str(labels), "--rollup", "min", "--threshold", "0.65",
                   "--top", "1")
    assert report["auc"]["value"] == 1.0  # a 0.7 and e 0.95 against b 0.2 and c 0.6
    assert {k: report["confusion"][k] for k in ("tp", "fp", "fn", "tn")} == {"tp": 2, "fp": 0, "fn": 0, "tn": 2}
    assert len(report["disagreements"]) == 1


def test_numeric_labels_are_positive_above_one_half(tmp_path, capsys):
    graded = write_lines(tmp_path / "graded.jsonl", [grade("a", 1, 0.9), grade("b", 1, 0.4), grade("c", 1, 0.6)])
    labels = write_lines(tmp_path / "labels.jsonl", [{"id": "a", "label": 1}, {"id": "b", "label": 0.5},
                                                     {"id": "c", "label": 0.75}])
    report = audit(capsys, "--graded", str(graded), "--labels", str(labels), "--draws", "0")
    assert report["label_type"] == "numeric"
    assert report["counts"]["positives"] == 2  # 0.5 is not above one half
    assert report["auc"] == {"value": 1.0, "interval": None, "level": 0.95, "draws": 0}
    assert report["spearman"] == pytest.approx(1.0)


def test_labels_from_transcript_metadata_after_a_real_run(tmp_path, capsys):
    convs = [chat("ok-1", "hi", "GOOD", "more?", "GOOD", metadata={"resolved": True}),
             chat("ok-2", "hello", "OKAY", metadata={"resolved": True}),
             chat("bad-1", "hey", "BAD", metadata={"resolved": False}),
             chat("bad-2", "yo", "BAD", "so?", "BAD", "well", "BAD", metadata={"resolved": False}),
             chat("unknown", "hm", "GOOD")]
    write_transcripts(tmp_path / "in", convs)
    assert main(["improve", "run", "--transcripts", str(tmp_path / "in"), "--reward", "improve_toy",
                 "--output", str(tmp_path / "out")]) == 0
    report = audit(capsys, "--graded", str(tmp_path / "out" / "graded.jsonl"), "--transcripts", str(tmp_path / "in"),
                   "--label-key", "resolved")
    assert report["labels"]["key"] == "resolved"
    assert report["counts"]["matched"] == 4 and report["counts"]["unlabelled"] == 1
    assert report["auc"]["value"] == 1.0
    # Message counts: ok-1 5, ok-2 3, bad-1 3, bad-2 7.
    assert report["length_baseline"] == {"measure": "messages", "auc": pytest.approx((1 + 0.5 + 0 + 0) / 4)}


def test_table_output(case, capsys):
    graded, labels = case
    assert main(["improve", "audit", "--graded", str(graded), "--labels", str(labels)]) == 0
    text = capsys.readouterr().out
    for fragment in ("ROC AUC", "0.875", "length baseline AUC", "Spearman", "largest disagreements", "precision"):
        assert fragment in text


def test_one_class_reports_no_auc(tmp_path, capsys):
    graded = write_lines(tmp_path / "graded.jsonl", [grade("a", 1, 0.9), grade("b", 1, 0.4)])
    labels = write_lines(tmp_path / "labels.jsonl", [{"id": "a", "label": True}, {"id": "b", "label": True}])
    report = audit(capsys, "--graded", str(graded), "--labels", str(labels))
    assert report["auc"]["value"] is None and report["length_baseline"]["auc"] is None
    assert any("both a positive and a negative" in n for n in report["notes"])


@pytest.mark.parametrize("lines, message", [
    ([{"id": "a", "label": "yes"}], "labels.jsonl:1: expected a boolean or a number, got 'yes' (field 'label')"),
    ([{"id": "a", "label": True}, {"id": "a", "label": False}], "labels.jsonl:2: label for 'a' given twice"),
    ([{"id": "a"}], "labels.jsonl:1: missing label (field 'label')"),
    ([{"label": True}], "labels.jsonl:1: missing or invalid id (field 'id')"),
])
def test_bad_labels_are_named(tmp_path, capsys, lines, message):
    graded = write_lines(tmp_path / "graded.jsonl", [grade("a", 1, 0.9)])
    labels = write_lines(tmp_path / "labels.jsonl", lines)
    assert main(["improve", "audit", "--graded", str(graded), "--labels", str(labels)]) == 2
    assert message in capsys.readouterr().err.replace("\n", "")


def test_bad_grades_and_label_sources_are_named(tmp_path, capsys):
    graded = write_lines(tmp_path / "graded.jsonl", [grade("a", 1, 0.9), {**grade("b", 1, 0.5), "score": 2}])
    labels = write_lines(tmp_path / "labels.jsonl", [{"id": "a", "label": True}])
    assert main(["improve", "audit", "--graded", str(graded), "--labels", str(labels)]) == 2
    assert "graded.jsonl:2: expected a score in [0, 1] (field 'score')" in capsys.readouterr().err.replace("\n", "")
    assert main(["improve", "audit", "--graded", str(graded)]) == 2
    assert "--labels FILE or as --transcripts DIR --label-key KEY" in capsys.readouterr().err.replace("\n", "")
    write_lines(graded, [grade("a", 1, 0.9)])
    write_transcripts(tmp_path / "in", [chat("a", "hi", "GOOD")])
    assert main(["improve", "audit", "--graded", str(graded), "--transcripts", str(tmp_path / "in"),
                 "--label-key", "resolved"]) == 2
    assert "no conversation has a 'resolved' label in its metadata (field 'metadata.resolved')" in \
        capsys.readouterr().err.replace("\n", "")
