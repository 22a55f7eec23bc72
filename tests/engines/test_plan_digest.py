"""The experiment digest: one per set of inputs, stable across runs and output folders, changed by any input."""
from __future__ import annotations

import copy

import orjson
import pytest
import yaml

from stateset_agents.core.errors import InputError
from stateset_plugins.engines.component import NemoRLTrainer
from stateset_plugins.engines.conformance import SAMPLE_ROWS, write_sample
from stateset_plugins.engines.pins import ENGINES
from stateset_plugins.engines.plan import build_plan, experiment_digest, normalise

BASE = {"reward": "reward:gsm8k", "base_model": "Qwen/Qwen2.5-0.5B-Instruct", "seed": 3, "steps": 4,
        "save_every": 2, "reward_config": {"reference_answer": "1"},
        "config": {"engine_algorithm": "grpo", "model_revision": "abc123",
                   "engine_config": {"trainer.n_gpus_per_node": 8, "actor_rollout_ref.actor.optim.lr": 1e-5}}}


def _plan(request=BASE, *, sha="a" * 64, caps=("local", "gpu"), version="1.0.0"):
    return build_plan(ENGINES["verl"], request, algorithms=("grpo", "ppo", "gspo", "dapo"), capabilities=caps,
                      reward_version=version, dataset_sha256=sha, rows=3)


def _changed(path, value):
    request = copy.deepcopy(BASE)
    node = request
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return request


def test_the_digest_is_stable_and_normalised():
    first = experiment_digest(_plan())
    assert first == experiment_digest(_plan()) and len(first) == 64
    # key order, 1.0 vs 1, and a tuple for a list are one input
    shuffled = dict(reversed(list(copy.deepcopy(BASE).items())))
    shuffled["config"]["engine_config"] = {"actor_rollout_ref.actor.optim.lr": 1e-5,
                                           "trainer.n_gpus_per_node": 8.0}
    assert experiment_digest(_plan(shuffled)) == first
    assert normalise({"a": (1.0, "e\u0301")}) == {"a": [1, "\u00e9"]}


@pytest.mark.parametrize("path,value", [
    (("config", "engine_algorithm"), "dapo"), (("base_model",), "Qwen/Qwen2.5-1.5B-Instruct"),
    (("config", "model_revision"), "def456"), (("seed",), 4), (("steps",), 5), (("reward",), "reward:nsr"),
    (("reward_config",), {"reference_answer": "2"}),
    (("config", "engine_config", "trainer.n_gpus_per_node"), 4),
])
def test_every_input_changes_the_digest(path, value):
    assert experiment_digest(_plan(_changed(path, value))) != experiment_digest(_plan())


def test_data_capabilities_and_reward_version_change_the_digest():
    base = experiment_digest(_plan())
    assert experiment_digest(_plan(sha="b" * 64)) != base
    assert experiment_digest(_plan(caps=("local",))) != base
    assert experiment_digest(_plan(version="1.0.1")) != base


def test_non_finite_numbers_and_unknown_algorithms_are_refused():
    with pytest.raises(InputError, match="engine_config.lr is nan"):
        _plan(_changed(("config", "engine_config"), {"lr": float("nan")}))
    with pytest.raises(InputError, match="not 'reinforce'"):
        _plan(_changed(("config", "engine_algorithm"), "reinforce"))


def test_a_render_names_its_digest_in_every_artifact_and_repeats_across_folders(tmp_path):
    dataset = write_sample(tmp_path / "d.jsonl")
    digests = []
    for name in ("one", "two"):
        request = {"dataset": str(dataset), "reward": "gsm8k", "base_model": "m", "output": str(tmp_path / name)}
        events = list(NemoRLTrainer().run(request))
        done = events[-1]
        assert done["type"] == "completed" and done["trained"] is False and done["validated"] is False
        digests.append(done["experiment_digest"])
    assert digests[0] == digests[1]
    out = tmp_path / "one" / "engine"
    manifest = orjson.loads((out / "engine_manifest.json").read_bytes())
    assert manifest["experiment_digest"] == digests[0] == experiment_digest(manifest["plan"])
    assert manifest["validated"] is False
    config = yaml.safe_load((out / "nemo_rl_config.yaml").read_text())
    assert config["stateset_agents"]["experiment_digest"] == digests[0]
    assert config["stateset_agents"]["validated"] is False
    rows = [orjson.loads(line) for line in (out / "prompts.jsonl").read_bytes().splitlines()]
    assert len(rows) == len(SAMPLE_ROWS) and {r["experiment_digest"] for r in rows} == {digests[0]}
    # another dataset snapshot is another experiment
    write_sample(dataset, SAMPLE_ROWS[:2])
    again = list(NemoRLTrainer().run({"dataset": str(dataset), "reward": "gsm8k", "base_model": "m",
                                      "output": str(tmp_path / "three")}))[-1]
    assert again["experiment_digest"] != digests[0]


def test_an_incomplete_request_fails_and_writes_nothing(tmp_path):
    events = list(NemoRLTrainer().run({"dataset": str(write_sample(tmp_path / "d.jsonl")), "reward": "gsm8k",
                                       "output": str(tmp_path / "run")}))
    assert events[-1]["type"] == "failed" and "base_model" in events[-1]["message"]
    assert not (tmp_path / "run").exists()


def test_engine_config_sets_the_engines_keys_but_never_the_plans(tmp_path):
    from stateset_plugins.engines import openrlhf, verl

    plan = _plan()
    lines = verl.overrides(plan, "f" * 64, tmp_path)
    assert "trainer.n_gpus_per_node=8" in lines and f"data.train_files={tmp_path}/train.parquet" in lines
    assert "reward.custom_reward_function.name=compute_score" in lines and "trainer.logger=[console,file]" in lines
    for key in ("data.train_files", "+reward.custom_reward_function.path", "data.seed"):
        with pytest.raises(InputError, match="decided by the plan"):
            verl.overrides(_plan(_changed(("config", "engine_config"), {key: "x"})), "f" * 64, tmp_path)
    argv = openrlhf.arguments(_plan(_changed(("config", "engine_config"), {"actor.num_gpus_per_node": 2})),
                              tmp_path, rows=3)
    assert argv[argv.index("--actor.num_gpus_per_node") + 1] == "2"
    assert argv[argv.index("--rollout.batch_size") + 1] == "3"  # never more prompts than the data has
    assert "--data.apply_chat_template" in argv and argv[argv.index("--reward.remote_url") + 1] == "{SCORER_URL}"
    with pytest.raises(InputError, match="decided by the plan"):
        openrlhf.arguments(_plan(_changed(("config", "engine_config"), {"reward.remote_url": "http://x"})),
                           tmp_path, rows=3)
