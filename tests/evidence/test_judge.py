"""Judge-based evaluation: both orders, a win only when both agree, consistency, kept prompts, and replay. The
mechanics run with scripted judges whose "weights" are a file, so changing the file changes the judge."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stateset_agents.cli import main
from stateset_plugins.evaluators.judged import JudgeEvaluator, parse_winner, weights_sha256


class ScriptedJudge:
    """Its weights file says whom it prefers: `first` (always reply A), or `digits` (the reply with more digits)."""

    def __init__(self, spec: str):
        self.rule = (Path(spec) / "judge.safetensors").read_text().strip()

    def identity(self):
        return {"scripted": self.rule}

    def __call__(self, messages, max_tokens):
        text = messages[-1]["content"]
        a = text.split("Reply A:\n", 1)[1].split("\n\nReply B:", 1)[0]
        b = text.split("Reply B:\n", 1)[1].split("\n\nWhich reply", 1)[0]
        if self.rule == "first":
            return "A reads better.\nWinner: A"
        if self.rule == "second":
            return "B reads better.\nWinner: B"
        da, db = sum(c.isdigit() for c in a), sum(c.isdigit() for c in b)
        return f"digits {da} vs {db}\nWinner: {'A' if da > db else 'B' if db > da else 'tie'}"


def scripted(tmp_path: Path, rule: str) -> Path:
    directory = tmp_path / "judge"
    directory.mkdir(exist_ok=True)
    (directory / "judge.safetensors").write_text(rule)
    return directory


def answers(tmp_path: Path) -> Path:
    cases = [{"id": f"c{i}", "prompt": [{"role": "user", "content": f"numbers please {i}"}],
              "base": {"output": {"role": "assistant", "content": "sure"}, "text": "sure", "score": 0.0},
              "candidate": {"output": {"role": "assistant", "content": f"{i}{i} 42"}, "text": f"{i}{i} 42",
                            "score": 1.0}} for i in range(5)]
    path = tmp_path / "eval" / "eval_results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cases": cases}))
    return path


def judge(tmp_path, rule, **request):
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Prefer the reply that answers with numbers.")
    evaluator = JudgeEvaluator(judge_loader=ScriptedJudge)
    base = {"results": str(answers(tmp_path)), "judge": str(scripted(tmp_path, rule)), "rubric": str(rubric),
            "output": str(tmp_path / "eval")}
    events = list(evaluator.run({**base, **request}))
    assert events[-1]["type"] == "completed", events[-1]
    return events[-1]["results"]


def test_a_judge_that_always_prefers_the_first_answer_yields_no_wins(tmp_path):
    record = judge(tmp_path, "first")
    s = record["summary"]
    assert (s["win"], s["loss"], s["undecided"]) == (0, 0, 5)
    assert s["consistency"] == 0.0 and s["first_position_rate"] == 1.0 and s["p_value"] == 1.0
    case = record["cases"][0]
    assert [p["order"] for p in case["passes"]] == [["base", "candidate"], ["candidate", "base"]]
    assert [p["preferred"] for p in case["passes"]] == ["base", "candidate"]


def test_a_consistent_judge_gives_wins_and_everything_is_kept(tmp_path):
    record = judge(tmp_path, "digits")
    s = record["summary"]
    assert (s["win"], s["loss"], s["undecided"]) == (5, 0, 0) and s["consistency"] == 1.0
    assert s["first_position_rate"] == 0.5 and s["p_value"] == pytest.approx(2 / 32)
    first, second = record["cases"][0]["passes"]
    assert "Reply A:\nsure" in first["messages"][1]["content"]  # base first ...
    assert "Reply A:\n00 42" in second["messages"][1]["content"]  # ... then the candidate first
    assert first["output"].endswith("Winner: B") and second["output"].endswith("Winner: A")
    assert record["judge"]["weights_sha256"] == weights_sha256(tmp_path / "judge")
    assert record["rubric"]["sha256"] and record["answers"]["sha256"]
    on_disk = json.loads((tmp_path / "eval" / "judge_results.json").read_text())
    assert on_disk["summary"] == s


def test_replay_reports_every_changed_verdict_of_a_changed_judge(tmp_path):
    judge(tmp_path, "digits")
    evaluator = JudgeEvaluator(judge_loader=ScriptedJudge)
    same = list(evaluator.run({"replay": str(tmp_path / "eval")}))[-1]["results"]
    assert same["changed"] == [] and same["judge"]["weights_changed"] is False and same["prompts"] == 10
    (tmp_path / "judge" / "judge.safetensors").write_text("first")  # the judge file changed
    changed = list(evaluator.run({"replay": str(tmp_path / "eval")}))[-1]["results"]
    assert changed["judge"]["weights_changed"] is True
    # pass 1 (base shown first) said B, now A: changed on every case; pass 2 said A and still does, in other words
    assert changed["changed_verdicts"] == 5
    assert {(c["id"], c["pass"], c["recorded"], c["now"]) for c in changed["changed"] if c["verdict_changed"]} == {
        (f"c{i}", 0, "B", "A") for i in range(5)}
    assert all(not c["verdict_changed"] for c in changed["changed"] if c["pass"] == 1)


def test_parse_winner():
    assert parse_winner("because...\nWinner: b") == "B" and parse_winner("Winner: tie") == "tie"
    assert parse_winner("no verdict") is None and parse_winner("Winner: A\nWinner: B") == "B"


def test_judge_from_the_command_line_with_a_local_model(trained_runs, workspace, tiny_model_dir, tmp_path, capsys):
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Prefer digits.")
    out = tmp_path / "eval"
    argv = ["evaluate", "--adapter", str(trained_runs[0] / "adapter"), "--prompts", str(workspace / "held_out.txt"),
            "--reward", "toy_digits", "--output", str(out), "--max-new-tokens", "12", "--judge",
            str(tiny_model_dir), "--rubric", str(rubric)]
    assert main(argv) == 0
    record = json.loads((out / "judge_results.json").read_text())
    assert record["judge"]["weights_sha256"] == weights_sha256(tiny_model_dir) and len(record["cases"]) == 6
    assert "verdict kept when the order was reversed" in capsys.readouterr().out
    assert main(["evaluate", "--replay", str(out)]) == 0  # greedy judge, same weights: nothing changed
    assert "0 of 12 verdicts changed" in capsys.readouterr().out
    hub = argv[:-4] + ["--judge", "some-org/some-judge", "--rubric", str(rubric)]
    assert main(hub) == 1
    assert "hub ids are refused" in capsys.readouterr().err.replace("\n", " ")
