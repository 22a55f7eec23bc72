"""A plugin's objective (`trainer:test_reinforce`, registered by the test plugin as a third party would) runs on the
shared engine through the same paths as the first-party ones: the registry, `train`, the Python face in
`stateset_agents.training`, and every hook the engine calls."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stateset_agents.cli import main
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.registry import get_registry
from stateset_plugins.trainers.objectives import (ALGORITHMS, COMPONENT, FIRST_PARTY, Objective, get_objective,
                                                  load_objective, objective_names, register_objective)
from tests.helpers.toy_rewards import DigitReward, make_rows, write_rows

ENGINE = Path(__file__).parents[2] / "plugins" / "stateset_plugins" / "trainers" / "engine.py"


def test_the_plugin_objective_is_registered_lazily_with_the_engine_capabilities():
    spec = get_registry().resolve("test_reinforce", "trainer")
    assert spec.target == f"{COMPONENT}:tests.support_plugins.stateset_test_objective:TestReinforce"  # lazy
    assert set(spec.capabilities) == {"lora", "checkpoint_resume", "eval_results", "local", "multi_process"}
    assert spec.requires == ("torch", "transformers", "peft")
    assert "test_reinforce" in objective_names() and "test_countdown" not in objective_names()
    remote = {s.name for s in get_registry().all("trainer") if "remote" in s.capabilities and s.name in FIRST_PARTY}
    assert remote == {"sft", "grpo", "multi_turn_grpo", "gspo", "dapo"}
    assert set(objective_names()) >= set(ALGORITHMS) == set(FIRST_PARTY)


def test_its_python_face_is_made_from_the_registry_and_stays_lazy():
    code = ("import sys; import stateset_agents.training.test_reinforce_trainer as m;"
            "assert 'torch' not in sys.modules, 'torch imported eagerly';"
            "from stateset_agents.training.test_reinforce_trainer import (TestReinforceTrainer,"
            " TestReinforceConfig, train_with_test_reinforce, TrainingFailed);"
            "assert TestReinforceTrainer.algorithm == 'test_reinforce' and TestReinforceConfig().bonus == 0.0;"
            "assert sorted(m.__all__) == ['TestReinforceConfig', 'TestReinforceTrainer', 'TrainingFailed',"
            " 'train_with_test_reinforce']")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_it_trains_through_the_python_face(tiny, tmp_path):
    from stateset_agents.training.test_reinforce_trainer import TestReinforceConfig, train_with_test_reinforce

    model, tokenizer = tiny
    cfg = TestReinforceConfig(steps=2, max_new_tokens=6, batch_size=2, num_generations=2, bonus=0.5, save_every=1)
    trainer = train_with_test_reinforce(model, tokenizer, make_rows(), DigitReward(), cfg, output_dir=tmp_path / "r")
    assert trainer.engine.step == 2
    records = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    # the engine called the objective's hooks: prepare's metric, loss's stats, shape_rewards' bonus
    assert [r["test_prepared_rows"] for r in records] == [4.0, 4.0]
    assert all(r["test_finite"] == 1.0 and "test_loss" in r for r in records)
    assert all(r["shaped_reward_mean"] == pytest.approx(r["reward_mean"] + 0.5) for r in records)


def test_it_trains_through_the_train_command(tiny_model_dir, tmp_path):
    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    config = tmp_path / "train.yaml"
    config.write_text("max_new_tokens: 6\nbatch_size: 2\nnum_generations: 2\nbonus: 0.25\n")
    out = tmp_path / "run"
    assert main(["train", "--dataset", str(data), "--algorithm", "test_reinforce", "--reward", "test_length",
                 "--base-model", str(tiny_model_dir), "--output", str(out), "--steps", "1",
                 "--config", str(config)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["algorithm"] == "test_reinforce" and manifest["committed_updates"] == 1
    assert manifest["config"]["bonus"] == 0.25
    assert (out / "adapter" / "adapter_model.safetensors").is_file()


def test_a_trainer_that_is_not_an_objective_and_an_unknown_name_are_refused():
    with pytest.raises(InputError, match="not an objective of the shared engine"):
        get_objective("test_countdown")
    with pytest.raises(InputError, match="unknown algorithm 'nope'.*grpo.*test_reinforce"):
        get_objective("nope")
    with pytest.raises(NotImplementedError, match="must define loss"):
        Objective().loss(None, None, None)
    with pytest.raises(StatesetError, match="'module:Class' path"):
        register_objective(lambda *a, **k: None, "no_colon", name="x", version="1.0")
    with pytest.raises(StatesetError, match="not a stateset_plugins.trainers.objectives.Objective"):
        load_objective("tests.support_plugins.stateset_test_plugins:CountdownTrainer")
    with pytest.raises(TypeError, match="rollout must be one of"):
        type("Bad", (Objective,), {"rollout": "two_turn"})


def test_the_engine_calls_objective_methods_and_probes_nothing():
    """No `hasattr`/`getattr` on the objective or its config in the engine: every hook has a default."""
    probes = [node for node in ast.walk(ast.parse(ENGINE.read_text()))
              if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("hasattr", "getattr")
              and ast.unparse(node.args[0]) in ("obj", "objective", "self.objective", "cfg", "config", "self.config")]
    assert probes == [], [ast.unparse(p) for p in probes]
