"""`--reward-config`: a reward config file (the reward, its config, a calibration) reaches the grades, the summary
and the printed train command; a file that disagrees with the flags is refused."""
from __future__ import annotations

import shlex

import orjson
import pytest
import yaml

from stateset_agents.core.calibration import CALIBRATION_KEY, calibrated_score
from stateset_agents.cli import main
from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import digest, sha256_file
from stateset_agents.pipeline.gate import _same_reward
from tests.improve.improve_helpers import chat, write_transcripts

CALIBRATION = {"method": "logistic-l2", "features": ["tone", "resolution"], "intercept": -2.0,
               "weights": {"tone": 2.0, "resolution": 1.0}, "fill": {"tone": 1.0, "resolution": 1.0}}


@pytest.fixture
def ingested(tmp_path):
    convs = [chat(f"c{i}", "Where is my order?", "Thanks for asking, it ships today." if i % 2 else "whatever")
             for i in range(4)]
    write_transcripts(tmp_path / "ingested", convs)
    return tmp_path / "ingested"


def _rows(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_improve_run_grades_with_the_calibrated_reward_and_records_the_file(ingested, tmp_path):
    reward_file = tmp_path / "reward.yaml"
    reward_file.write_text(yaml.safe_dump({"schema_version": 1, "reward": "customer_support", "config": {},
                                           "calibration": CALIBRATION}))
    assert main(["improve", "run", "--transcripts", str(ingested), "--output", str(tmp_path / "plain"),
                 "--reward", "customer_support"]) == 0
    assert main(["improve", "run", "--transcripts", str(ingested), "--output", str(tmp_path / "cal"),
                 "--reward-config", str(reward_file)]) == 0
    plain, cal = _rows(tmp_path / "plain" / "graded.jsonl"), _rows(tmp_path / "cal" / "graded.jsonl")
    assert [r["uncalibrated_score"] for r in cal] == [r["score"] for r in plain]
    assert [r["score"] for r in cal] == [calibrated_score(CALIBRATION, r["breakdown"]) for r in plain]
    sha = digest({CALIBRATION_KEY: CALIBRATION})
    assert {r["reward"]["config_sha256"] for r in cal} == {sha}
    summary = orjson.loads((tmp_path / "cal" / "improve_summary.json").read_bytes())
    assert summary["reward"]["config_sha256"] == sha
    assert summary["reward_config"] == {"path": str(reward_file), "sha256": sha256_file(reward_file),
                                        "calibrated": True}
    argv = shlex.split(summary["train_command"])
    assert argv[argv.index("--reward-config") + 1] == str(reward_file)


def test_a_reward_config_for_another_reward_is_refused(ingested, tmp_path, capsys):
    reward_file = tmp_path / "reward.yaml"
    reward_file.write_text(yaml.safe_dump({"reward": "nsr", "config": {}}))
    rc = main(["improve", "run", "--transcripts", str(ingested), "--output", str(tmp_path / "out"),
               "--reward", "customer_support", "--reward-config", str(reward_file)])
    assert rc == 2
    assert "the reward config is for nsr" in capsys.readouterr().err
    assert not (tmp_path / "out" / "graded.jsonl").exists()


def test_no_reward_named_anywhere_is_refused(ingested, tmp_path, capsys):
    rc = main(["improve", "run", "--transcripts", str(ingested), "--output", str(tmp_path / "out")])
    assert rc == 2 and "name the reward" in capsys.readouterr().err


def test_gate_refuses_evaluations_of_different_reward_versions_or_configs(tmp_path):
    one = {"name": "customer_support", "version": "2.0.0", "config_sha256": "a" * 64}
    _same_reward([{"reward": one}, {"reward": dict(one)}], [tmp_path / "r1", tmp_path / "r2"])
    for other in ({**one, "version": "1.0.0"}, {**one, "config_sha256": "b" * 64}):
        with pytest.raises(InputError, match="one reward version and config"):
            _same_reward([{"reward": one}, {"reward": other}], [tmp_path / "r1", tmp_path / "r2"])
