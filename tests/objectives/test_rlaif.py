"""RLAIF: the judge over HTTP (a local chat-completions server) and as a local causal LM, the on-disk verdict
cache, and the train command's judge flags."""
from __future__ import annotations

import json

from stateset_agents.cli import main
from stateset_plugins.models.judge import parse_score
from tests.helpers.toy_rewards import make_rows, write_rows
from tests.objectives.judge_server import JudgeServer


def test_parse_score():
    assert parse_score("ok.\nScore: 7", 10) == 0.7
    assert parse_score("score=3 ... Score: 12", 10) == 1.0  # the last one, clamped to [0, 1]
    assert parse_score("no number here", 10) is None


def test_rlaif_run_scores_with_the_judge_caches_and_replays_verdicts(make_trainer, tmp_path):
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Reward replies made of digits.")
    with JudgeServer() as server:
        first = make_trainer("rlaif", tmp_path / "run", steps=2, judge_url=server.url, rubric=str(rubric))
        first.train()
        asked = len(server.requests)
        assert asked == first.reward.calls > 0
        body = server.requests[0]["body"]
        assert server.requests[0]["path"] == "/v1/chat/completions" and body["temperature"] == 0
        assert "Reward replies made of digits." in body["messages"][0]["content"]
        cache = [json.loads(x) for x in (tmp_path / "run" / "judge_cache.jsonl").read_text().splitlines()]
        assert len(cache) == asked and all(e["parsed"] and "Score:" in e["verdict"] for e in cache)
        metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # the same judge model behind another address: a re-run over the directory (--overwrite keeps the cache)
    # asks it nothing and reproduces the rewards
    with JudgeServer() as other:
        again = make_trainer("rlaif", tmp_path / "run", steps=2, judge_url=other.url, rubric=str(rubric),
                             overwrite=True)
        again.train()
        assert other.requests == [] and again.reward.calls == 0
    rerun = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["reward_mean"] for m in rerun] == [m["reward_mean"] for m in metrics]


def test_local_judge_model_keeps_raw_verdicts(make_trainer, tmp_path, tiny_model_dir):
    trainer = make_trainer("rlaif", tmp_path / "run", steps=1, judge_model=str(tiny_model_dir),
                           judge_max_new_tokens=6)
    trainer.train()
    cache = [json.loads(x) for x in (tmp_path / "run" / "judge_cache.jsonl").read_text().splitlines()]
    assert len(cache) == trainer.reward.calls == 8  # 2 prompts x 4 completions, each distinct
    assert all(isinstance(e["verdict"], str) and set(e) >= {"key", "score", "parsed"} for e in cache)
    assert trainer.reward.identity()["name"] == "judge"


def test_train_command_judge_flags(tiny_model_dir, tmp_path, capsys):
    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Digits are good.")
    config = tmp_path / "train.yaml"
    config.write_text("max_new_tokens: 6\nbatch_size: 1\nnum_generations: 2\n")
    with JudgeServer() as server:
        argv = ["train", "--dataset", str(data), "--algorithm", "rlaif", "--judge-url", server.url, "--rubric",
                str(rubric), "--base-model", str(tiny_model_dir), "--output", str(tmp_path / "r"), "--steps", "1",
                "--config", str(config)]
        assert main(argv) == 0
        assert len(server.requests) == 2
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["reward"]["name"] == "judge"
    capsys.readouterr()
    base = ["train", "--dataset", str(data), "--base-model", str(tiny_model_dir), "--steps", "1"]
    assert main(base + ["--algorithm", "grpo", "--reward", "gsm8k", "--judge-url", "http://x/v1",
                        "--output", str(tmp_path / "g")]) != 0
    assert "the grpo objective does not use 'judge_url'" in capsys.readouterr().err.replace("\n", " ")
    assert main(base + ["--algorithm", "rlaif", "--reward", "gsm8k", "--judge-url", "http://x/v1",
                        "--output", str(tmp_path / "h")]) != 0
    assert "drop --reward" in capsys.readouterr().err.replace("\n", " ")
    assert main(base + ["--algorithm", "rlaif", "--output", str(tmp_path / "i")]) != 0
    assert "needs a judge" in capsys.readouterr().err.replace("\n", " ")
