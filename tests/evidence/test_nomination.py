"""Checkpoint selection on validation, nomination, one look at test, and the gate on nominated test results."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stateset_agents.cli import main
from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import sha256_file
from stateset_agents.pipeline.gate import run_gate
from tests.evidence.evidence_helpers import HELD_OUT, RUN_CONFIG
from tests.helpers.toy_rewards import DigitReward


def split_file(path: Path, role: str, prompts) -> Path:
    path.write_text("".join(json.dumps({"id": f"{role}{i}", "split": role, "prompt": [{"role": "user", "content": p}]})
                            + "\n" for i, p in enumerate(prompts)))
    return path


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    root = tmp_path_factory.mktemp("splits")
    return split_file(root / "validation.jsonl", "validation", HELD_OUT[:3]), split_file(root / "test.jsonl", "test",
                                                                                          HELD_OUT[3:])


@pytest.fixture(scope="module")
def selected_runs(tiny_model_dir, workspace, splits, tmp_path_factory):
    """Two runs (seeds 0, 1) of 3 updates, a checkpoint after each, one kept besides the best on validation."""
    from stateset_plugins.trainers.run import train_run

    root = tmp_path_factory.mktemp("selected")
    runs = []
    for seed in (0, 1):
        request = {"algorithm": "grpo", "dataset": str(workspace / "curated.jsonl"), "base_model": str(tiny_model_dir),
                   "eval_prompts": str(splits[0]), "output": str(root / f"seed{seed}"), "seed": seed,
                   "config": {**RUN_CONFIG, "steps": 3, "save_every": 1, "keep_checkpoints": 1},
                   "eval": {"max_new_tokens": 16}}
        events = list(train_run(request, reward=DigitReward()))
        assert events[-1]["type"] == "completed", events[-1]
        runs.append(root / f"seed{seed}")
    return runs


@pytest.fixture()
def copies(selected_runs, tmp_path):
    out = []
    for run in selected_runs:
        shutil.copytree(run, tmp_path / run.name)
        out.append(tmp_path / run.name)
    return out


def test_each_checkpoint_is_validated_and_the_best_is_kept(selected_runs, splits):
    run = selected_runs[0]
    manifest = json.loads((run / "manifest.json").read_text())
    selection = manifest["selection"]
    assert selection["split"] == "validation" and selection["prompts_sha256"] == sha256_file(splits[0])
    assert selection["protocol"]["decoding"] == "greedy" and selection["protocol"]["max_new_tokens"] == 16
    assert [c["step"] for c in selection["checkpoints"]] == [1, 2, 3]
    best = selection["best_on_validation"]
    means = {c["step"]: c["candidate_mean"] for c in selection["checkpoints"]}
    assert means[best] == max(means.values())
    kept = sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir())
    assert kept == sorted({best, 3})  # the last one (keep_checkpoints 1) and the best on validation
    assert [c["kept"] for c in selection["checkpoints"]] == [s in kept for s in (1, 2, 3)]
    for step in kept:
        results = json.loads((run / "checkpoints" / f"step-{step:06d}" / "validation_results.json").read_text())
        assert results["split"] == "validation" and results["totals"]["candidate_mean"] == means[step]
    final = json.loads((run / "eval_results.json").read_text())  # the final adapter's = the last checkpoint's
    assert final["split"] == "validation" and final["totals"]["candidate_mean"] == means[3]
    assert manifest["eval_summary"]["split"] == "validation"


def test_nominate_then_one_look_at_test(copies, splits, capsys):
    run, test = copies[0], splits[1]
    look = ["evaluate", "--run", str(run), "--split", "test", "--prompts", str(test), "--reward", "toy_digits"]
    assert main(look) == 2  # nothing nominated yet
    assert "nominate" in capsys.readouterr().err
    assert main(["nominate", str(run), "--checkpoint", "99"]) == 2
    assert "checkpoint 99 is not in this run" in capsys.readouterr().err.replace("\n", " ")
    step = json.loads((run / "manifest.json").read_text())["selection"]["best_on_validation"]
    assert main(["nominate", str(run), "--checkpoint", str(step)]) == 0
    nomination = json.loads((run / "nomination.json").read_text())
    assert nomination["step"] == step and nomination["validation"]["step"] == step
    assert nomination["adapter"]["sha256"] == sha256_file(run / "checkpoints" / f"step-{step:06d}" / "adapter" /
                                                          "adapter_model.safetensors")

    assert main(look) == 0
    results = json.loads((run / "test" / f"step-{step:06d}" / "eval_results.json").read_text())
    assert results["split"] == "test" and results["adapter"]["sha256"] == nomination["adapter"]["sha256"]
    assert results["prompts"]["split"] == "test" and len(results["cases"]) == len(HELD_OUT[3:])
    ledger = [json.loads(line) for line in (run / "test_looks.jsonl").read_text().splitlines()]
    assert len(ledger) == 1 and ledger[0]["step"] == step and ledger[0]["again"] is False
    capsys.readouterr()

    assert main(look) == 2  # a second look at the same checkpoint
    assert "already looked at on test" in capsys.readouterr().err.replace("\n", " ")
    assert main(look + ["--again"]) == 0
    ledger = [json.loads(line) for line in (run / "test_looks.jsonl").read_text().splitlines()]
    assert [entry["again"] for entry in ledger] == [False, True]

    # a test file is looked at only through --split test, never by a plain evaluate
    plain = ["evaluate", "--run", str(run), "--prompts", str(test), "--reward", "toy_digits", "--output",
             str(run / "sneak")]
    assert main(plain) == 1
    assert "this is a test file" in capsys.readouterr().err.replace("\n", " ")
    assert not (run / "sneak" / "eval_results.json").exists()


def test_the_gate_reads_the_test_results_of_nominated_checkpoints(copies, splits, tmp_path, capsys):
    test = splits[1]
    with pytest.raises(InputError, match="no checkpoint is nominated"):
        run_gate(copies, test, "toy_digits", tmp_path / "g0", min_seeds=2)
    for run in copies:
        assert main(["nominate", str(run), "--checkpoint", "3"]) == 0
    with pytest.raises(InputError, match="no test result of the nominated checkpoint"):
        run_gate(copies, test, "toy_digits", tmp_path / "g1", min_seeds=2)
    for run in copies:
        assert main(["evaluate", "--run", str(run), "--split", "test", "--prompts", str(test), "--reward",
                     "toy_digits"]) == 0
    record = run_gate(copies, test, "toy_digits", tmp_path / "g2", min_seeds=2)
    assert record["evidence"] == "recorded test looks of nominated checkpoints"
    assert record["prompts"]["split"] == "test"
    assert [r["nominated_checkpoint"]["step"] for r in record["runs"]] == [3, 3]
    for i, run in enumerate(copies):
        copied = tmp_path / "g2" / "evaluations" / f"{i:02d}-{run.name}" / "eval_results.json"
        assert sha256_file(copied) == sha256_file(run / "test" / "step-000003" / "eval_results.json")
    # the gate looked at nothing itself: still one look per run
    assert all(len((run / "test_looks.jsonl").read_text().splitlines()) == 1 for run in copies)
    # a changed result file is refused
    path = copies[0] / "test" / "step-000003" / "eval_results.json"
    path.write_text(path.read_text().replace('"cases"', '"cases" ', 1))
    with pytest.raises(InputError, match="changed since the look"):
        run_gate(copies, test, "toy_digits", tmp_path / "g3", min_seeds=2)
