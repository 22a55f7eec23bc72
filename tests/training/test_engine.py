"""The engine end to end on the tiny model: learning, the run directory, resume rules, integrity failures."""
from __future__ import annotations

import json
import threading

import pytest
import torch

from stateset_agents.core.errors import InputError
from stateset_plugins.trainers.api import TrainingFailed
from tests.helpers.toy_rewards import NaNReward


def events_of(trainer):
    return list(trainer.events())


def test_short_grpo_run_raises_a_learnable_reward(make_trainer):
    trainer = make_trainer("grpo", steps=24, num_generations=8)
    rewards = [e["metrics"]["reward_mean"] for e in trainer.events() if e["type"] == "metrics"]
    assert len(rewards) == 24
    early, late = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert late > early + 0.2, rewards


@pytest.mark.parametrize("algo", ["sft", "gspo", "dapo", "multi_turn_grpo"])
def test_every_algorithm_completes_a_short_run(make_trainer, tmp_path, algo):
    trainer = make_trainer(algo, tmp_path / "run", steps=2)
    done = trainer.train()
    assert done["type"] == "completed" and done["step"] == 2
    assert (tmp_path / "run" / "adapter" / "adapter_model.safetensors").exists()


def test_run_directory_contents_and_adapter_reload(make_trainer, tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    prompts = tmp_path / "held_out.txt"
    prompts.write_text("name a number\nhello there\n")  # not training prompts: split isolation refuses those
    trainer = make_trainer("grpo", out, steps=3, eval_prompts=str(prompts))
    trainer.train()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for key in ("reward_mean", "reward_std", "kl", "loss", "clip_fraction", "zero_variance_fraction",
                "step_time", "tokens_per_s", "generation_time", "update_time"):
        assert key in metrics[0], key
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000002", "step-000003"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["committed_updates"] == 3
    assert manifest["dataset"]["rows"] == 6 and manifest["seed"] == 0
    assert manifest["lineage"]["sources"]["logs/a.jsonl"]["lines"] == [1, 2, 3, 4, 5, 6]
    assert len(manifest["adapter"]["sha256"]) == 64 and manifest["config"]["steps"] == 3
    assert manifest["eval_summary"]["totals"]["cases"] == 2 and manifest["software"]["torch"]
    ev = json.loads((out / "eval_results.json").read_text())
    case = ev["cases"][0]
    assert set(case["base"]) >= {"output", "score", "breakdown"} and "score" in case["candidate"]
    assert ev["reward"]["name"] == "toy_digits"
    assert ev["totals"]["improved"] + ev["totals"]["regressed"] + ev["totals"]["unchanged"] == 2

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = PeftModel.from_pretrained(base, str(out / "adapter"))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tok("hello", return_tensors="pt").input_ids
    out_ids = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out_ids.shape[1] > ids.shape[1]
    reloaded = dict(model.named_parameters())
    trained = dict(trainer.model.named_parameters())
    name = next(k for k in trained if "lora_B" in k)
    assert torch.equal(reloaded[name], trained[name]) and trained[name].abs().sum() > 0


def test_existing_run_needs_resume_or_overwrite(make_trainer, tmp_path):
    out = tmp_path / "run"
    make_trainer("grpo", out, steps=2).train()
    with pytest.raises(InputError, match="--resume .*--overwrite"):
        make_trainer("grpo", out, steps=2)
    make_trainer("grpo", out, steps=2, overwrite=True).train()
    with pytest.raises(InputError, match="no checkpoint"):
        make_trainer("grpo", tmp_path / "empty", steps=2, resume=True)


def test_changed_config_refuses_to_resume(make_trainer, tmp_path):
    out = tmp_path / "run"
    make_trainer("grpo", out, steps=2).train()
    with pytest.raises(InputError, match="learning_rate: checkpoint 0.02, now 0.01"):
        make_trainer("grpo", out, steps=2, learning_rate=1e-2, resume=True)


def test_a_checkpoint_from_before_a_config_field_existed_resumes_at_its_default(make_trainer, tmp_path):
    """A field added since a checkpoint was written (absent from its state.json) counts as its default: a run of
    the older release resumes; the same field set to anything else is refused."""
    import json

    out = tmp_path / "run"
    make_trainer("grpo", out, steps=4, save_every=2).train()
    latest = sorted((out / "checkpoints").iterdir())[-1]
    state = json.loads((latest / "state.json").read_text())
    del state["config"]["num_iterations"]  # as a checkpoint of the release before the field
    (latest / "state.json").write_text(json.dumps(state))
    assert make_trainer("grpo", out, steps=4, save_every=2, resume=True).engine.step == 4
    with pytest.raises(InputError, match="num_iterations: checkpoint 1, now 2"):
        make_trainer("grpo", out, steps=4, save_every=2, num_iterations=2, resume=True)


def test_stop_then_resume_matches_an_uninterrupted_run(make_trainer, tmp_path):
    make_trainer("grpo", tmp_path / "full", steps=4).train()
    stop = threading.Event()
    trainer = make_trainer("grpo", tmp_path / "cut", steps=4)
    trainer.engine._stop = stop
    events = []
    for e in trainer.events():
        events.append(e)
        if e["type"] == "metrics" and e["step"] == 1:
            stop.set()  # as SIGINT/SIGTERM would: finish this update, save, stop
    assert events[-1]["type"] == "failed" and events[-1]["reason"] == "interrupted"
    assert "--resume" in events[-1]["message"]
    assert (tmp_path / "cut" / "checkpoints" / "step-000001").exists()
    make_trainer("grpo", tmp_path / "cut", steps=4, resume=True).train()
    a = (tmp_path / "full" / "adapter" / "adapter_model.safetensors").read_bytes()
    b = (tmp_path / "cut" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert a == b
    steps = [json.loads(x)["step"] for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_integrity_failure_stops_the_run_and_keeps_the_last_checkpoint(make_trainer, tmp_path):
    out = tmp_path / "run"
    make_trainer("grpo", out, steps=2).train()
    before = (out / "checkpoints" / "step-000002" / "adapter" / "adapter_model.safetensors").read_bytes()
    trainer = make_trainer("grpo", out, steps=2, overwrite=True, reward=NaNReward())
    events = events_of(trainer)
    last = events[-1]
    assert last["type"] == "failed" and last["reason"] == "integrity"
    assert "reward is not finite" in last["message"] and ":line" in last["sample"]
    assert not (out / "adapter").exists()
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"
    with pytest.raises(TrainingFailed):
        make_trainer("grpo", tmp_path / "other", steps=2, reward=NaNReward()).train()
    # a run that failed at its third update keeps the checkpoint of its second
    out2 = tmp_path / "run2"
    trainer = make_trainer("grpo", out2, steps=4)
    trainer.reward = None
    good = make_trainer("grpo", None, steps=1).reward

    class FailsLater:
        calls = 0

        def identity(self):
            return good.identity()

        def grade(self, items):
            FailsLater.calls += 1
            return (good if FailsLater.calls <= 2 else NaNReward()).grade(items)

    trainer.engine.reward = FailsLater()
    last = events_of(trainer)[-1]
    assert last["reason"] == "integrity" and last["last_checkpoint_step"] == 2
    assert (out2 / "checkpoints" / "step-000002" / "adapter").exists() and before
    assert not (out2 / "checkpoints" / "step-000003").exists()


def test_dapo_dynamic_sampling_drops_and_refills(make_trainer, tmp_path):
    from stateset_agents import Reward, TurnGrade

    class ConstantForSome(Reward):
        name = "half_constant"

        def grade_turn(self, conversation, turn_index):
            text = conversation["messages"][turn_index].get("content") or ""
            if conversation["messages"][0]["content"] in ("hello", "thanks"):
                return TurnGrade(score=0.5)
            return TurnGrade(score=min(1.0, len(text) / 20))

    trainer = make_trainer("dapo", None, steps=3, batch_size=3, reward=ConstantForSome())
    metrics = [e["metrics"] for e in trainer.events() if e["type"] == "metrics"]
    assert any(m["sampling_rounds"] > 1 for m in metrics)
    assert any(m["zero_variance_fraction"] > 0 for m in metrics)
