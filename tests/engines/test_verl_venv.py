"""verl 0.9.1 in its own venv: its config classes accept what trainer:verl renders (GRPO, PPO, GSPO, DAPO), its
reward manager scores rendered rows through our custom reward function with exactly our reward's scores, and a
launch that cannot train here (no GPU, no vLLM) fails closed."""
from __future__ import annotations

from stateset_plugins.engines.component import RESULTS, VerlTrainer
from stateset_plugins.engines.conformance import SAMPLE_CASES, check, write_sample

ALGORITHMS = ("grpo", "ppo", "gspo", "dapo")


def test_verl_validates_every_algorithm_and_scores_with_our_reward(engine_python, tmp_path, tiny_model_dir):
    python = engine_python("verl")
    result = check("verl", tmp_path, python=str(python), algorithms=ALGORITHMS, base_model=str(tiny_model_dir))
    answer = result["answer"]
    assert answer["verl"] == "0.9.1"
    # verl's reward manager, through reward_fn.py and our scorer, gives what our reward gives, case by case
    assert answer["scores"] == result["expected"] and len(answer["scores"]) == len(SAMPLE_CASES)
    assert set(result["expected"]) == {0.0, 1.0} and result["ok"]
    assert [e["applicable"] for e in answer["extra"]] == [1.0] * len(SAMPLE_CASES)
    assert "algorithm: AlgoConfig" in answer["validated"] and "actor: FSDPActorConfig" in answer["validated"]
    assert "adv_estimator=grpo, loss_mode=vanilla" in answer["validated"]
    also = answer["also"]
    assert "critic: FSDPCriticConfig" in also["ppo"] and "adv_estimator=gae, loss_mode=vanilla" in also["ppo"]
    assert "adv_estimator=grpo, loss_mode=gspo" in also["gspo"]
    assert len(set(result["digests"].values())) == len(ALGORITHMS)  # one experiment per algorithm


def test_a_verl_launch_that_cannot_train_fails_closed(engine_python, tmp_path, tiny_model_dir):
    python = engine_python("verl")
    request = {"dataset": str(write_sample(tmp_path / "d.jsonl")), "reward": "gsm8k", "steps": 1,
               "base_model": str(tiny_model_dir), "output": str(tmp_path / "run"),
               "config": {"engine_python": str(python)}}
    events = list(VerlTrainer().run(request))
    assert events[-1]["type"] == "failed" and "verl exited with code" in events[-1]["message"]
    assert not any(e["type"] == "completed" for e in events)
    assert any("verl" in e.get("message", "") for e in events if e["type"] == "log")  # verl's own output
    assert not (tmp_path / "run" / "engine" / RESULTS).exists()
