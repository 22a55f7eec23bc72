"""OpenRLHF 0.11.2 in its own venv (its wheel without its GPU-only pins): its own argument parser and checks accept
what trainer:openrlhf renders (GRPO, PPO, GSPO, DAPO), and its remote-reward client (`openrlhf.utils.agent`, the
code path of --reward.remote_url), fed its own prompt format, gets exactly our reward's scores from our scorer."""
from __future__ import annotations

from stateset_plugins.engines.conformance import SAMPLE_CASES, check

ALGORITHMS = ("grpo", "ppo", "gspo", "dapo")


def test_openrlhf_parses_every_algorithm_and_scores_with_our_reward(engine_python, tmp_path, tiny_model_dir):
    python = engine_python("openrlhf")
    result = check("openrlhf", tmp_path, python=str(python), algorithms=ALGORITHMS,
                   base_model=str(tiny_model_dir))
    answer = result["answer"]
    assert answer["openrlhf"] == "0.11.2"
    # one rollout at a time (SingleTurnAgentExecutor.execute) and one batched request: our reward's scores
    assert answer["scores"] == result["expected"] and answer["batch_scores"] == result["expected"]
    assert len(answer["scores"]) == len(SAMPLE_CASES) and set(result["expected"]) == {0.0, 1.0}
    parsed, also = answer["parsed"], answer["also"]
    assert (parsed["estimator"], parsed["label_key"], parsed["seed"], parsed["remote_urls"]) == (
        "group_norm", "label", 7, 1)
    assert also["ppo"]["estimator"] == "gae" and also["ppo"]["critic"] == str(tiny_model_dir)
    assert also["gspo"]["policy_loss_type"] == "gspo"
    assert also["dapo"]["eps_clip_low_high"] == [0.2, 0.28] and also["dapo"]["dynamic_filtering"] is True
