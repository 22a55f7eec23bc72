"""`improve calibrate`, end to end through the CLI, on a small synthetic graded file whose checks carry a known
signal (and whose reward score carries none)."""
from __future__ import annotations

import json
import math
import random

import orjson
import pytest

from stateset_agents.core.calibration import CALIBRATION_KEY, calibrated_score, load_reward_file
from stateset_agents.cli import main
from stateset_agents.core.jsonio import digest, sha256_file

IDENTITY = {"name": "toy", "version": "1.0.0", "config_sha256": digest({})}


def write_lines(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def synthetic(tasks=14, trials=5, seed=1, identity=IDENTITY):
    """Grade rows, labels and transcripts: `quality` tracks the label, `polite` is noise, `slipped` is judged only
    on some turns, `note` is text (not a check). The reward's own score is a constant: it tells nothing."""
    rng = random.Random(seed)
    grades, labels, transcripts = [], [], []
    for t in range(tasks):
        for k in range(trials):
            cid = f"c{t:02d}-{k}"
            y = rng.random() < 0.5
            labels.append({"id": cid, "label": y})
            turns = 1 + rng.randrange(3)
            messages = [{"role": "user", "content": "hi"}]
            for n in range(turns):
                breakdown = {"quality": round(min(1.0, max(0.0, 0.3 + 0.4 * y + rng.gauss(0, 0.2))), 3),
                             "polite": rng.random() < 0.8, "note": "text is not a check"}
                if not y and rng.random() < 0.3:
                    breakdown["slipped"] = 0.0
                grades.append({"conversation_id": cid, "turn_index": 2 * n + 1, "score": 0.5, "applicable": True,
                               "breakdown": breakdown, "reason": "", "reward": identity})
                messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}]
            grades.append({"conversation_id": cid, "turn_index": 2 * turns + 1, "score": 0.0, "applicable": False,
                           "breakdown": {}, "reason": "nothing to judge", "reward": identity})
            messages.append({"role": "assistant", "content": "bye"})
            transcripts.append({"id": cid, "messages": messages, "metadata": {"task_id": t, "team": t % 3}})
    return grades, labels, transcripts


@pytest.fixture
def case(tmp_path):
    grades, labels, transcripts = synthetic()
    (tmp_path / "ingest").mkdir()
    return {"graded": write_lines(tmp_path / "graded.jsonl", grades),
            "labels": write_lines(tmp_path / "labels.jsonl", labels),
            "transcripts": write_lines(tmp_path / "ingest" / "transcripts.jsonl", transcripts),
            "dir": tmp_path}


def calibrate(capsys, case, *extra, output="reward.yaml", transcripts=True) -> dict:
    args = ["improve", "calibrate", "--graded", str(case["graded"]), "--labels", str(case["labels"]),
            "--output", str(case["dir"] / output), "--draws", "300", "--json", *extra]
    if transcripts:
        args += ["--transcripts", str(case["dir"] / "ingest")]
    capsys.readouterr()
    assert main(args) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def fails(capsys, args) -> str:
    capsys.readouterr()
    assert main(["improve", "calibrate", *args]) == 2
    return capsys.readouterr().err


def test_fits_the_signal_out_of_fold_and_writes_a_reward_config_the_kernel_loads(case, capsys):
    report = calibrate(capsys, case)
    cal = report["calibration"]
    assert report["features"] == ["polite", "quality", "slipped"]  # text is no check
    assert cal["weights"]["quality"] > 0
    measured = report["measured"]
    assert measured["uncalibrated"]["auc"] == 0.5  # a constant score ranks nothing
    assert report["notes"] == []  # a clear gain over the reward's own weights and over length
    assert measured["calibrated"]["auc"] > 0.85
    for m in measured.values():
        low, high = m["interval"]
        assert low <= m["auc"] <= high
        assert len(m["per_fold"]) == 5
    # Grouped by task (the transcripts' metadata has task_id): a task's conversations share one fold.
    ids = sorted(row["id"] for row in map(json.loads, case["labels"].read_text().splitlines()))
    fold_of_task = {}
    for cid, fold in zip(ids, report["folds"]):
        assert fold_of_task.setdefault(cid.split("-")[0], fold) == fold
    assert len(fold_of_task) == 14 and set(report["folds"]) == set(range(5))
    fitted = cal["fitted"]
    assert fitted["labels"]["sha256"] == sha256_file(case["labels"])
    assert fitted["graded"]["sha256"] == sha256_file(case["graded"])
    assert fitted["reward"] == IDENTITY and fitted["C"] in (0.01, 0.1, 1.0, 10.0, 100.0)
    assert fitted["out_of_fold"]["auc"] == pytest.approx(measured["calibrated"]["auc"])
    assert fitted["counts"]["conversations"] == 70

    name, config = load_reward_file(case["dir"] / "reward.yaml")
    assert name == "toy" and set(config) == {CALIBRATION_KEY}
    applied = config[CALIBRATION_KEY]
    assert applied["weights"] == cal["weights"] and applied["features"] == cal["features"]
    # A turn judged better on quality scores higher, as the kernel applies it; an unjudged check takes its fill.
    low, high = ({"quality": q, "polite": True} for q in (0.2, 0.9))
    assert calibrated_score(applied, high) > calibrated_score(applied, low)
    assert calibrated_score(applied, {"quality": 0.5, "polite": True}) == calibrated_score(
        applied, {"quality": 0.5, "polite": True, "slipped": applied["fill"]["slipped"]})


def test_output_is_deterministic_and_does_not_hang_on_line_order(case, capsys):
    calibrate(capsys, case, output="a.yaml")
    calibrate(capsys, case, output="b.yaml")
    first = (case["dir"] / "a.yaml").read_bytes()
    assert first == (case["dir"] / "b.yaml").read_bytes()
    rng = random.Random(5)
    for key in ("graded", "labels"):
        lines = case[key].read_text().splitlines(keepends=True)
        rng.shuffle(lines)
        case[key].write_text("".join(lines))
    calibrate(capsys, case, output="c.yaml")
    a, c = (load_reward_file(case["dir"] / n)[1][CALIBRATION_KEY] for n in ("a.yaml", "c.yaml"))
    for doc in (a, c):
        del doc["fitted"]["graded"]["sha256"], doc["fitted"]["labels"]["sha256"]
    assert a == c


def test_json_output_and_default_grouping_without_transcripts(case, capsys):
    extra = [{"conversation_id": "unlabelled", "turn_index": 1, "score": 0.5, "applicable": True,
              "breakdown": {"quality": 0.9}, "reason": "", "reward": IDENTITY},
             {"conversation_id": "c00-0", "turn_index": 9, "score": 0.0, "applicable": False, "breakdown": {},
              "reason": "", "reward": IDENTITY},
             {"conversation_id": "nothing", "turn_index": 1, "score": 0.0, "applicable": False, "breakdown": {},
              "reason": "", "reward": IDENTITY}]
    with open(case["graded"], "ab") as f:
        f.write(b"".join(orjson.dumps(r) + b"\n" for r in extra))
    report = calibrate(capsys, case, "--folds", "4", output="reward.json", transcripts=False)
    assert report["grouping"].startswith("metadata.task_id where present")
    counts = report["calibration"]["fitted"]["counts"]
    assert (counts["conversations"], counts["unlabelled"], counts["no_applicable_turn"]) == (70, 1, 1)
    assert counts["groups"] == 70  # no metadata: each conversation alone
    assert report["length_measure"] == "messages through the last graded turn"
    assert load_reward_file(case["dir"] / "reward.json")[0] == "toy"


def test_refuses_fewer_than_20_labels_of_a_class(case, capsys):
    rows = [json.loads(line) for line in case["labels"].read_text().splitlines()]
    positives = 0
    for row in rows:
        positives += row["label"]
        if positives > 19:
            row["label"] = False
    write_lines(case["labels"], rows)
    err = fails(capsys, ["--graded", str(case["graded"]), "--labels", str(case["labels"]),
                         "--output", str(case["dir"] / "r.yaml")])
    assert "at least 20 labelled conversations of each class" in err and "19 positive" in err
    assert not (case["dir"] / "r.yaml").exists()


def _mutate(path, line, change):
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    change(rows[line - 1])
    write_lines(path, rows)


@pytest.mark.parametrize("target, line, change, expected", [
    ("graded", 3, lambda r: r.update(score=1.5), "graded.jsonl:3: expected a score in [0, 1] (field 'score')"),
    ("graded", 2, lambda r: r.update(breakdown=[1]), "graded.jsonl:2: expected an object (the per-check breakdown)"),
    ("graded", 4, lambda r: r.update(reward={**IDENTITY, "version": "2"}), "graded.jsonl:4: graded by"),
    ("graded", 1, lambda r: r["reward"].pop("config_sha256"), "(field 'reward.config_sha256')"),
    ("labels", 2, lambda r: r.update(label="yes"), "labels.jsonl:2: expected a boolean or a number"),
])
def test_bad_input_names_file_line_and_field(case, capsys, target, line, change, expected):
    _mutate(case[target], line, change)
    err = fails(capsys, ["--graded", str(case["graded"]), "--labels", str(case["labels"]),
                         "--output", str(case["dir"] / "r.yaml")])
    assert expected in err
    assert not (case["dir"] / "r.yaml").exists()


def test_the_config_the_rows_were_graded_with_must_be_given(case, capsys, tmp_path):
    other = {**IDENTITY, "config_sha256": digest({"strict": True})}
    grades, _, _ = synthetic(identity=other)
    write_lines(case["graded"], grades)
    base = ["--graded", str(case["graded"]), "--labels", str(case["labels"]), "--output", str(tmp_path / "r.yaml")]
    assert "(field 'reward.config_sha256')" in fails(capsys, base)
    own = tmp_path / "own.yaml"
    own.write_text("schema_version: 1\nreward: toy\nconfig:\n  strict: true\n")
    capsys.readouterr()
    assert main(["improve", "calibrate", *base, "--reward-config", str(own), "--draws", "0"]) == 0
    name, config = load_reward_file(tmp_path / "r.yaml")
    assert name == "toy" and config["strict"] is True and CALIBRATION_KEY in config
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("reward: other\nconfig: {strict: true}\n")
    assert "the reward config is for other" in fails(capsys, [*base, "--reward-config", str(wrong)])


def test_recalibrating_rows_graded_with_a_calibration(case, capsys):
    calibrate(capsys, case)
    _, config = load_reward_file(case["dir"] / "reward.yaml")
    identity = {**IDENTITY, "config_sha256": digest(config)}
    grades, _, _ = synthetic(identity=identity)
    for g in grades:  # as the kernel writes them: the calibrated score, the reward's own beside it
        if g["applicable"]:
            g["uncalibrated_score"], g["score"] = g["score"], calibrated_score(config[CALIBRATION_KEY], g["breakdown"])
    write_lines(case["graded"], grades)
    report = calibrate(capsys, case, "--reward-config", str(case["dir"] / "reward.yaml"), output="again.yaml")
    assert report["calibration"]["fitted"]["replaces"] is True
    assert report["measured"]["uncalibrated"]["auc"] == 0.5  # the reward's own score, not the calibrated one


def test_group_key_and_checks_to_weight(case, capsys):
    report = calibrate(capsys, case, "--group-key", "team", "--folds", "3")
    assert report["calibration"]["fitted"]["counts"]["groups"] == 3
    rows = [json.loads(x) for x in case["transcripts"].read_text().splitlines()]
    del rows[6]["metadata"]["team"]
    write_lines(case["transcripts"], rows)
    err = fails(capsys, ["--graded", str(case["graded"]), "--labels", str(case["labels"]), "--output",
                         str(case["dir"] / "r.yaml"), "--transcripts", str(case["dir"] / "ingest"),
                         "--group-key", "team"])
    assert "transcripts.jsonl:7: conversation 'c01-1' has no metadata.team to group by" in err
    grades = [json.loads(x) for x in case["graded"].read_text().splitlines()]
    for g in grades:
        g["breakdown"] = {"verdict": "kept"}
    write_lines(case["graded"], grades)
    err = fails(capsys, ["--graded", str(case["graded"]), "--labels", str(case["labels"]), "--output",
                         str(case["dir"] / "r.yaml")])
    assert "holds no numeric check" in err and "(field 'breakdown')" in err


def test_the_kernel_applies_the_fitted_weights_as_calibrate_scored_them(tmp_path, capsys):
    """improve run -> improve calibrate -> improve run --reward-config: the second run's scores are the calibration
    applied turn by turn, and its conversation means are what calibrate's fitting scores them."""
    from stateset_agents.pipeline.calibrate import conversation_score
    from tests.improve.improve_helpers import chat, write_transcripts

    rng = random.Random(4)
    conversations, labels = [], []
    for n in range(60):
        polite = n % 2 == 0  # the label follows politeness; the toy reward's keyword score ignores it
        words = [rng.choice(("GOOD", "OKAY", "BAD")) + (" please" if polite or rng.random() < 0.2 else "")
                 for _ in range(2)]
        conversations.append(chat(f"c{n:02d}", "hi", words[0], "and?", words[1], metadata={"task_id": n // 3}))
        labels.append({"id": f"c{n:02d}", "label": polite})
    write_transcripts(tmp_path / "ingest", conversations)
    write_lines(tmp_path / "labels.jsonl", labels)
    capsys.readouterr()
    assert main(["improve", "run", "--transcripts", str(tmp_path / "ingest"), "--reward", "improve_toy",
                 "--output", str(tmp_path / "first"), "--held-out", "0"]) == 0
    assert main(["improve", "calibrate", "--graded", str(tmp_path / "first" / "graded.jsonl"), "--labels",
                 str(tmp_path / "labels.jsonl"), "--transcripts", str(tmp_path / "ingest"), "--output",
                 str(tmp_path / "reward.yaml"), "--draws", "0"]) == 0
    assert main(["improve", "run", "--transcripts", str(tmp_path / "ingest"), "--reward-config",
                 str(tmp_path / "reward.yaml"), "--output", str(tmp_path / "second"), "--held-out", "0"]) == 0
    _, config = load_reward_file(tmp_path / "reward.yaml")
    calibration = config[CALIBRATION_KEY]
    assert calibration["weights"]["polite"] > 0
    rows = [json.loads(x) for x in (tmp_path / "second" / "graded.jsonl").read_text().splitlines()]
    turns: dict[str, list] = {}
    for row in rows:
        assert row["reward"]["config_sha256"] == digest(config)
        if row["applicable"]:
            assert row["score"] == calibrated_score(calibration, row["breakdown"])
            turns.setdefault(row["conversation_id"], []).append(row)
    for cid, graded in turns.items():
        mean = math.fsum(r["score"] for r in graded) / len(graded)
        assert mean == pytest.approx(conversation_score(calibration, [r["breakdown"] for r in graded]), abs=1e-15)


def test_says_when_the_fit_does_not_beat_the_rewards_own_weights(case, capsys):
    grades = [json.loads(x) for x in case["graded"].read_text().splitlines()]
    label_of = {r["id"]: r["label"] for r in map(json.loads, case["labels"].read_text().splitlines())}
    for g in grades:  # the reward's own score now knows the label; its checks still carry only part of it
        if g["applicable"]:
            g["score"] = 0.9 if label_of[g["conversation_id"]] else 0.1
    write_lines(case["graded"], grades)
    capsys.readouterr()
    assert main(["improve", "calibrate", "--graded", str(case["graded"]), "--labels", str(case["labels"]),
                 "--output", str(case["dir"] / "r.yaml"), "--draws", "200"]) == 0
    out = capsys.readouterr()
    assert "rank no better than the reward's own" in out.err and "calibrated AUC" in out.out
