"""The `train` command over the trainer component, and the lazy public imports."""
from __future__ import annotations

import json
import subprocess
import sys

from stateset_agents.cli import main
from tests.helpers.toy_rewards import make_rows, write_rows


def test_train_command_runs_refuses_and_resumes(tiny_model_dir, tmp_path, capsys):
    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    prompts = tmp_path / "held_out.jsonl"
    prompts.write_text(json.dumps({"prompt": [{"role": "user", "content": "what is 4 + 4"}],
                                   "metadata": {"answer": "8"}}) + "\n")
    config = tmp_path / "train.yaml"
    config.write_text("max_new_tokens: 8\nbatch_size: 2\nnum_generations: 2\n")
    out = tmp_path / "runs" / "r1"
    argv = ["train", "--dataset", str(data), "--algorithm", "grpo", "--reward", "gsm8k", "--base-model",
            str(tiny_model_dir), "--eval-prompts", str(prompts), "--output", str(out), "--steps", "2",
            "--save-every", "1", "--config", str(config)]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["committed_updates"] == 2 and manifest["config"]["save_every"] == 1
    assert manifest["dataset"]["sha256"] and manifest["base_model"]["source"] == "local"
    assert json.loads((out / "eval_results.json").read_text())["reward"]["name"] == "gsm8k"
    capsys.readouterr()
    assert main(argv) != 0
    assert "already holds a run" in capsys.readouterr().err
    assert main(argv + ["--resume", "--seed", "3"]) != 0
    assert "seed: checkpoint 0, now 3" in capsys.readouterr().err.replace("\n", " ")
    bad = tmp_path / "bad.yaml"
    bad.write_text("epsilon_high: 0.3\n")
    assert main(argv[:-1] + [str(bad), "--overwrite"]) != 0
    assert "epsilon_high" in capsys.readouterr().err


def test_training_rows_that_are_held_out_cases_are_refused_or_dropped(tiny_model_dir, tmp_path, capsys):
    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    prompts = tmp_path / "held_out.jsonl"
    prompts.write_text(json.dumps({"prompt": [{"role": "user", "content": "What is 2 + 3?"}]}) + "\n")
    argv = ["train", "--dataset", str(data), "--algorithm", "sft", "--reward", "gsm8k", "--base-model",
            str(tiny_model_dir), "--eval-prompts", str(prompts), "--output", str(tmp_path / "run"), "--steps", "1"]
    assert main(argv) != 0
    err = capsys.readouterr().err.replace("\n", " ")
    assert "line 2" in err and "--drop-overlap" in err  # row 2's "what is 2 + 3" matches after normalising
    assert main(argv + ["--drop-overlap"]) == 0
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["split_isolation"]["policy"] == "drop"
    assert [d["dataset_line"] for d in manifest["split_isolation"]["dropped_rows"]] == [2]
    assert manifest["dataset"]["rows"] == 5


def test_public_imports_are_lazy():
    code = ("import sys, stateset_agents, stateset_agents.training.gspo_trainer, stateset_plugins.trainers;"
            "assert 'torch' not in sys.modules, 'torch imported eagerly';"
            "from stateset_agents import GRPOTrainer, MultiTurnGRPOTrainer;"
            "from stateset_agents.training.gspo_trainer import GSPOTrainer, GSPOConfig, train_with_gspo;"
            "from stateset_agents.training.dapo_trainer import DAPOTrainer;"
            "assert GSPOConfig().epsilon_high == 4e-4 and GRPOTrainer.algorithm == 'grpo'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_python_api_trains_with_a_model_tokenizer_dataset_and_reward(tiny, digit_reward, rows):
    from stateset_agents.training.gspo_trainer import GSPOConfig, train_with_gspo

    model, tokenizer = tiny
    trainer = train_with_gspo(model, tokenizer, rows, digit_reward,
                              GSPOConfig(steps=2, max_new_tokens=8, batch_size=2, num_generations=2))
    assert trainer.engine.step == 2
