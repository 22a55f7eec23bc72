"""`evaluate` and `evaluator:paired` on a real run of the tiny model."""
from __future__ import annotations

import json

from stateset_agents.cli import main
from stateset_agents.core.runtimes import load_component
from tests.evidence.evidence_helpers import HELD_OUT, write_jsonl


def evaluate(run, workspace, out, *extra):
    return main(["evaluate", "--adapter", str(run / "adapter"), "--prompts", str(workspace / "held_out.txt"),
                 "--reward", "toy_digits", "--output", str(out), *extra])


def test_paired_evaluation_writes_the_evidence(trained_runs, workspace, tmp_path, capsys):
    run = trained_runs[0]
    assert evaluate(run, workspace, tmp_path / "a") == 0
    results = json.loads((tmp_path / "a" / "eval_results.json").read_text())
    assert [c["id"] for c in results["cases"]] == [f"line{i}" for i in range(1, 7)]
    case = results["cases"][0]
    assert {"output", "score", "breakdown", "truncated"} <= set(case["base"]) and "score" in case["candidate"]
    assert results["reward"]["name"] == "toy_digits"
    # greedy by default, whatever the run trained with (temperature 1.0, 8 new tokens); base model from its manifest
    assert results["protocol"] == {"decoding": "greedy", "samples": 1, "temperature": 0.0, "max_new_tokens": 256,
                                   "seed": None, "truncation": "failure"}
    assert results["decoding"]["max_prompt_tokens"] == 512
    assert results["base_model"]["source"] == "local"
    s = results["statistics"]
    assert s["cases"] == 6 and s["interval"]["low"] <= s["mean_difference"] <= s["interval"]["high"]
    assert 0 < s["p_value"] <= 1 and s["unit"] == "case"
    assert 0 <= results["truncation"]["base"] <= 6 and results["truncation"]["max_new_tokens"] == 256
    assert all(r["difference"] < 0 for r in results["regressions"])
    assert results["split_isolation"]["checked"] is True  # the run's dataset was found and checked
    manifest_adapter = json.loads((run / "manifest.json").read_text())["adapter"]["sha256"]
    assert results["adapter"]["sha256"] == manifest_adapter
    assert "mean difference" in capsys.readouterr().out

    # same seed and settings: the same outputs, case by case
    assert evaluate(run, workspace, tmp_path / "b") == 0
    again = json.loads((tmp_path / "b" / "eval_results.json").read_text())
    assert [c["candidate"]["output"] for c in again["cases"]] == [c["candidate"]["output"] for c in results["cases"]]
    assert again["statistics"] == results["statistics"]


def test_overlapping_training_rows_are_refused_or_dropped(trained_runs, workspace, tmp_path, capsys):
    leaky = write_jsonl(tmp_path / "leaky.jsonl", [
        {"prompt": [{"role": "user", "content": "Count to five!"}],
         "completion": {"role": "assistant", "content": "1 2 3 4 5"}},
        {"prompt": [{"role": "user", "content": "unrelated"}], "completion": {"role": "assistant", "content": "x"}}])
    rc = evaluate(trained_runs[0], workspace, tmp_path / "refused", "--dataset", str(leaky))
    err = capsys.readouterr().err
    assert rc != 0 and "line 1" in err and "line2" in err and "normalised" in err
    assert not (tmp_path / "refused" / "eval_results.json").exists()
    assert evaluate(trained_runs[0], workspace, tmp_path / "dropped", "--dataset", str(leaky), "--drop-overlap") == 0
    results = json.loads((tmp_path / "dropped" / "eval_results.json").read_text())
    assert results["split_isolation"]["dropped_cases"] == ["line2"] and len(results["cases"]) == len(HELD_OUT) - 1


def test_a_changed_adapter_is_refused(run_copy, workspace, tmp_path, capsys):
    run = run_copy(0)
    weights = run / "adapter" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert evaluate(run, workspace, tmp_path / "out") != 0
    assert "adapter_model.safetensors" in capsys.readouterr().err


def test_incomplete_requests_fail_closed():
    with load_component("evaluator:paired") as evaluator:
        events = list(evaluator.run({"prompts": "x.txt"}))
    assert events[-1]["type"] == "failed" and "adapter" in events[-1]["message"]
