"""A calibration in a reward's config re-scores applicable turns in the kernel, in every runtime, and its file is
read with clear errors. The fitting itself (`improve calibrate`) is tested in tests/improve."""
from __future__ import annotations

import json
import math

import pytest
import yaml

from stateset_agents.core.calibration import (CALIBRATION_KEY, calibrated_score, check_calibration, load_reward_file,
                                         resolve_reward)
from stateset_agents.core.components import GradeItem
from stateset_agents.core.errors import InputError
from stateset_agents.core.runtimes import load_component

CALIBRATION = {"method": "logistic-l2", "features": ["tone", "resolution"], "intercept": -1.0,
               "weights": {"tone": 1.5, "resolution": 2.0}, "fill": {"tone": 1.0, "resolution": 0.5}}


def _conversation(reply: str) -> dict:
    return {"id": "c1", "messages": [{"role": "user", "content": "Where is my order?"},
                                     {"role": "assistant", "content": reply}]}


def test_score_is_the_logistic_of_the_weighted_checks_with_fill_for_missing_ones():
    z = -1.0 + 1.5 * 0.75 + 2.0 * 0.5  # tone from the breakdown, resolution filled
    assert calibrated_score(CALIBRATION, {"tone": 0.75}) == pytest.approx(1 / (1 + math.exp(-z)))
    assert calibrated_score(CALIBRATION, {"tone": True, "resolution": 0}) == pytest.approx(1 / (1 + math.exp(-0.5)))
    extreme = {**CALIBRATION, "intercept": -1e6}
    assert calibrated_score(extreme, {}) == 0.0  # no overflow far from zero
    assert calibrated_score({**CALIBRATION, "intercept": 1e6}, {}) == 1.0


@pytest.mark.parametrize("field, value", [("features", []), ("intercept", float("nan")), ("weights", {"tone": 1.0}),
                                          ("fill", {"tone": "x", "resolution": 1.0})])
def test_a_malformed_calibration_names_its_field(field, value):
    with pytest.raises(InputError) as err:
        check_calibration({**CALIBRATION, field: value})
    assert err.value.field.startswith(f"{CALIBRATION_KEY}.{field}")


@pytest.mark.parametrize("runtime", ["inprocess", "subprocess"])
def test_calibrated_reward_rescores_applicable_turns_and_identity_covers_the_calibration(runtime):
    conv = _conversation("Thank you for waiting; I have found your order and it ships today.")
    with load_component("reward:customer_support", runtime=runtime) as plain:
        raw = plain.grade([GradeItem(conv)])[0]
        plain_identity = plain.identity()
    with load_component("reward:customer_support", config={CALIBRATION_KEY: CALIBRATION}, runtime=runtime) as cal:
        row = cal.grade([GradeItem(conv)])[0]
        identity = cal.identity()
    assert row["applicable"] and row["uncalibrated_score"] == raw["score"]
    assert row["score"] == pytest.approx(calibrated_score(CALIBRATION, raw["breakdown"]))
    assert row["score"] != raw["score"]
    assert row["breakdown"] == raw["breakdown"]  # the reward's own checks are kept as they were
    assert identity["config_sha256"] != plain_identity["config_sha256"] == raw["reward"]["config_sha256"]
    assert row["reward"] == identity


def test_a_not_applicable_turn_is_left_as_it_is():
    conv = {"id": "c2", "messages": [{"role": "user", "content": "hi"},
                                     {"role": "assistant", "content": None,
                                      "tool_calls": [{"id": "t", "type": "function",
                                                      "function": {"name": "get_order", "arguments": "{}"}}]}]}
    with load_component("reward:customer_support", config={CALIBRATION_KEY: CALIBRATION}) as cal:
        row = cal.grade([GradeItem(conv)])[0]
    assert not row["applicable"] and "uncalibrated_score" not in row


def test_reward_file_round_trip_and_errors(tmp_path):
    good = tmp_path / "reward.yaml"
    good.write_text(yaml.safe_dump({"schema_version": 1, "reward": "customer_support", "config": {},
                                    "calibration": CALIBRATION}))
    name, config = load_reward_file(good)
    assert name == "customer_support" and config == {CALIBRATION_KEY: CALIBRATION}
    as_json = tmp_path / "reward.json"
    as_json.write_text(json.dumps({"reward": "nsr", "config": {"policy": {"rules": []}}}))
    assert load_reward_file(as_json) == ("nsr", {"policy": {"rules": []}})

    cases = {
        "future.yaml": ({"schema_version": 9, "reward": "x"}, "schema_version"),
        "noreward.yaml": ({"config": {}}, "reward"),
        "badcal.yaml": ({"reward": "x", "calibration": {**CALIBRATION, "intercept": "high"}}, "calibration.intercept"),
        "nested.yaml": ({"reward": "x", "config": {CALIBRATION_KEY: CALIBRATION}}, f"config.{CALIBRATION_KEY}"),
    }
    for filename, (data, field) in cases.items():
        path = tmp_path / filename
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(InputError) as err:
            load_reward_file(path)
        assert err.value.field == field and err.value.path == str(path)
    with pytest.raises(InputError, match="not found"):
        load_reward_file(tmp_path / "missing.yaml")


def test_flags_and_file_must_agree(tmp_path):
    path = tmp_path / "reward.yaml"
    path.write_text(yaml.safe_dump({"reward": "nsr", "config": {"policy": {"rules": []}}}))
    assert resolve_reward(None, {}, path) == ("nsr", {"policy": {"rules": []}})
    assert resolve_reward("reward:nsr", {}, path)[0] == "reward:nsr"
    with pytest.raises(InputError, match="for nsr"):
        resolve_reward("tool_calling", {}, path)
    with pytest.raises(InputError, match="policy given both"):
        resolve_reward("nsr", {"policy": {}}, path)
