"""`industry list | show | prepare | audit`: recipes from the registry (a third party's too), bundles with split roles
by customer, the overlap audit failing on leakage, deterministic generators, labelled behaviour the policies see."""
from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import orjson
import pytest
import yaml

from stateset_agents.cli import main
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.pipeline.industry import ROLES, audit_bundle, load_recipe, prepare
from stateset_agents.plugin_api.splits import refuse_evaluation_file

from tests.industry.industry_helpers import FIRST_PARTY

FLAWS = {"write_without_confirmation", "invented_id", "wrong_refund_amount", "missed_transfer", "unhelpful_reply"}


def rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_list_shows_every_recipe_with_its_package_a_third_partys_too(capsys):
    assert main(["industry", "list", "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)["recipes"]}
    assert set(FIRST_PARTY) <= set(listed)
    assert all(listed[n]["package"] == "stateset-agents" for n in FIRST_PARTY)
    if "pharmacy" not in listed:
        pytest.fail("the example recipe is not installed: pip install ./examples/stateset-recipe-pharmacy "
                    "(scripts/setup does it)")
    assert listed["pharmacy"]["package"] == "stateset-recipe-pharmacy" and listed["pharmacy"]["plugin"] == "pharmacy"
    assert main(["industry", "list"]) == 0
    assert "stateset-recipe-pharmacy" in capsys.readouterr().out


def test_show_names_tools_rules_and_rewards(capsys):
    assert main(["industry", "show", "retail", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "return_delivered_items" in [t["name"] for t in info["tools"]]
    assert "refund-matches-returned-items" in info["policy"]["rules"]
    assert [r["reward"] for r in info["rewards"]][0] == "nsr" and info["policy_text"].startswith("# ")
    assert main(["industry", "show", "nosuch"]) == 2
    assert "no recipe 'nosuch'" in capsys.readouterr().err


def test_the_airline_recipe_uses_the_shipped_policy_unchanged(tmp_path):
    shipped = resources.files("stateset_plugins.rewards").joinpath("policies/airline.yaml").read_bytes()
    prepare("airline", tmp_path / "b", size=12)
    assert (tmp_path / "b" / "policy.yaml").read_bytes() == shipped


@pytest.mark.parametrize("name", FIRST_PARTY + ("pharmacy",))
def test_generators_are_deterministic(name):
    _, recipe = load_recipe(name)
    once, again = (b"".join(orjson.dumps(c) + b"\n" for c in recipe.generate(30, 7)) for _ in range(2))
    other = b"".join(orjson.dumps(c) + b"\n" for c in recipe.generate(30, 8))
    assert once == again and once != other


def test_a_bundle_is_the_same_bytes_for_the_same_seed(tmp_path):
    files = []
    for out, seed in (("a", 3), ("b", 3), ("c", 4)):
        prepare("telecom", tmp_path / out, size=24, seed=seed)
        files.append({p.relative_to(tmp_path / out).as_posix(): p.read_bytes()
                      for p in sorted((tmp_path / out).rglob("*")) if p.is_file()})
    assert files[0] == files[1]
    assert files[0]["train/conversations.jsonl"] != files[2]["train/conversations.jsonl"]


@pytest.mark.parametrize("name", FIRST_PARTY)
def test_each_conversation_is_labelled_and_the_policy_scores_flaws_below_good_behaviour(name):
    """Every flaw shows up; the recipe's own policy, graded by nsr on the turn that shows the label, puts each flaw
    it judges below good behaviour (a flaw no rule of the policy judges, e.g. the airline policy's missed
    transfer, is left to tool_calling's expected calls)."""
    from stateset_plugins.rewards.nsr import NSRReward

    _, recipe = load_recipe(name)
    reward = NSRReward({"policy": yaml.safe_load(recipe.policy)})
    scores: dict[str, list[float]] = {}
    for conv in recipe.generate(44, 0):
        meta = conv["metadata"]
        assert meta["label"] in FLAWS | {"good"} and meta["shows"] and meta["customer_id"]
        assert meta["acceptable"] == (meta["label"] == "good") and meta["expected_tool_calls"]
        assert conv["messages"][meta["decision_turn"]]["role"] == "assistant"
        grade = reward.grade_turn(conv, meta["decision_turn"])
        if grade.applicable:
            scores.setdefault(meta["label"], []).append(grade.score)
    assert FLAWS - {"missed_transfer"} <= set(scores) and scores["good"]
    assert min(scores["good"]) == 1.0
    for flaw in FLAWS & set(scores):
        assert max(scores[flaw]) < 1.0, (flaw, scores[flaw])


def test_prepare_splits_by_customer_and_records_roles(tmp_path, capsys):
    out = tmp_path / "bundle"
    assert main(["industry", "prepare", "banking", "--output", str(out), "--size", "40", "--seed", "1"]) == 0
    assert "overlap audit passed" in capsys.readouterr().out
    record = json.loads((out / "bundle.json").read_text())
    assert record["use"].startswith("generated: for starting and smoke-testing")
    customers = {}
    for role in ROLES:
        convs = rows(out / role / "conversations.jsonl")
        assert convs and all(c["split"] == role for c in convs)
        assert record["splits"][role]["conversations"] == len(convs)
        for c in convs:
            assert customers.setdefault(c["metadata"]["customer_id"], role) == role  # one role per customer
        if role != "train":
            prompts = rows(out / role / "prompts.jsonl")
            assert len(prompts) == len(convs) and all(p["split"] == role for p in prompts)
            assert all(p["prompt"][-1]["role"] != "assistant" for p in prompts)
    assert sum(record["labels"].values()) == 40 and set(record["labels"]) == FLAWS | {"good"}
    assert record["audit"]["passed"] and not record["audit"]["collisions"]
    assert all(Path(out / f).is_file() for f in record["files"])
    readme = (out / "README.md").read_text()
    assert "smoke-testing" in readme and "--eval-prompts validation/prompts.jsonl" in readme
    assert "--split test --prompts test/prompts.jsonl" in readme
    assert yaml.safe_load((out / "rewards" / "tool_calling.yaml").read_text())["config"]["write_tools"]
    # an existing bundle is not replaced without --overwrite
    assert main(["industry", "prepare", "banking", "--output", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_a_bundles_test_and_validation_files_are_refused_as_training_data(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "bundle"
    prepare("saas_billing", out, size=16)
    for path in ("test/conversations.jsonl", "test/prompts.jsonl", "validation/conversations.jsonl"):
        with pytest.raises(InputError, match="training never reads validation or test rows"):
            refuse_evaluation_file(out / path)
    refuse_evaluation_file(out / "train" / "conversations.jsonl")  # the train split is training data
    argv = ["train", "--dataset", str(out / "test" / "conversations.jsonl"), "--algorithm", "sft", "--reward",
            "nsr", "--policy", str(out / "policy.yaml"), "--base-model", str(tiny_model_dir), "--output",
            str(tmp_path / "run"), "--steps", "1"]
    assert main(argv) != 0
    assert "this is a test file" in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "run" / "adapter").exists()


def _copy_with(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_a_leak_injected_into_a_split_fails_the_audit(tmp_path, capsys):
    clean = tmp_path / "clean"
    prepare("retail", clean, size=40)
    assert audit_bundle(clean)["passed"]
    test_row = rows(clean / "test" / "conversations.jsonl")[0]

    def inject(name: str, row: dict) -> Path:
        bundle = _copy_with(clean, tmp_path / name)
        with open(bundle / "train" / "conversations.jsonl", "ab") as f:
            f.write(orjson.dumps({**row, "split": "train"}) + b"\n")
        return bundle

    # a test conversation copied into train under another id and customer: exact
    exact = inject("exact", {**test_row, "id": "copied-1",
                             "metadata": {**test_row["metadata"], "customer_id": "someone_else"}})
    with pytest.raises(InputError, match=r"\(exact\)") as caught:
        audit_bundle(exact)
    assert "train/conversations.jsonl line" in str(caught.value)
    assert main(["industry", "audit", str(exact)]) == 2
    assert "the splits leak" in capsys.readouterr().err

    # the same with its opening's case and punctuation changed: normalised
    messages = [dict(m) for m in test_row["messages"]]
    first_user = next(m for m in messages if m["role"] == "user")
    first_user["content"] = first_user["content"].upper().replace(".", " !")
    normalised = inject("normalised", {**test_row, "id": "copied-2", "messages": messages,
                                       "metadata": {**test_row["metadata"], "customer_id": "someone_else"}})
    with pytest.raises(InputError, match=r"\(normalised\)"):
        audit_bundle(normalised)

    # a test customer's other conversation in train
    fresh = rows(clean / "train" / "conversations.jsonl")[0]
    customer = inject("customer", {**fresh, "id": "copied-3", "metadata": {**fresh["metadata"],
                                                                           "customer_id": test_row["metadata"]
                                                                           ["customer_id"]}})
    with pytest.raises(InputError, match="customer .* is in train and in test|is in test and in train"):
        audit_bundle(customer)

    # a row that does not record its folder's role
    unrecorded = _copy_with(clean, tmp_path / "unrecorded")
    lines = (unrecorded / "test" / "prompts.jsonl").read_bytes().splitlines()
    row = orjson.loads(lines[0])
    del row["split"]
    (unrecorded / "test" / "prompts.jsonl").write_bytes(b"\n".join([orjson.dumps(row)] + lines[1:]) + b"\n")
    with pytest.raises(InputError, match="must record its role") as caught:
        audit_bundle(unrecorded)
    assert caught.value.line == 1 and caught.value.field == "split"


def test_prepare_refuses_a_recipe_whose_splits_leak_and_writes_nothing(tmp_path, leaky_recipe):
    out = tmp_path / "bundle"
    with pytest.raises(InputError, match="the splits leak") as caught:
        prepare(leaky_recipe, out, size=20)
    assert "(normalised)" in str(caught.value) or "(exact)" in str(caught.value)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(StatesetError, match=r"recipe 'unlabelled': conversation 4 has no metadata.label"):
        prepare("unlabelled", out, size=20)
    with pytest.raises(InputError, match="at least 10"):
        prepare(leaky_recipe, out, size=5)
    assert not out.exists()


def test_a_missed_transfer_the_airline_policy_does_not_judge_is_seen_by_tool_calling():
    from stateset_plugins.rewards.tool_calling import ToolCallingReward

    _, recipe = load_recipe("airline")
    reward = ToolCallingReward(recipe.rewards[1]["config"])
    finals = {}
    for conv in recipe.generate(44, 0):
        if conv["metadata"]["flow"] == "handoff":
            last = max(i for i, m in enumerate(conv["messages"]) if m["role"] == "assistant")
            finals.setdefault(conv["metadata"]["label"], []).append(reward.grade_turn(conv, last).score)
    assert finals["missed_transfer"] and max(finals["missed_transfer"]) < 0.5 <= min(finals["good"])
