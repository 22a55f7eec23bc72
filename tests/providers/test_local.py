"""provider:local end to end: the real trainer (tiny model, offline) in a detached worker, through the CLI."""
from __future__ import annotations

import json
import sys
import time

import pytest

from stateset_agents.cli import main
from stateset_agents.remote import state


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from tests.helpers.toy_rewards import build_tiny_model

    path = tmp_path_factory.mktemp("tiny")
    build_tiny_model(path)
    return path


def _write_inputs(tmp_path):
    from tests.helpers.toy_rewards import make_rows, write_rows

    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    prompts = tmp_path / "held_out.txt"
    prompts.write_text("what is 7 + 8\ncount to three\n")
    config = tmp_path / "remote.yaml"
    config.write_text("training: {steps: 1, batch_size: 2, max_new_tokens: 4, save_every: 1}\n")
    return data, prompts, config


def test_train_remote_local_end_to_end_and_attach(tiny_model, tmp_path, capsys, monkeypatch):
    data, prompts, config = _write_inputs(tmp_path)
    out = tmp_path / "runs" / "r1"
    argv = ["train-remote", "--provider", "local", "--dataset", str(data), "--base-model", str(tiny_model),
            "--eval-prompts", str(prompts), "--max-cost", "1", "--max-hours", "0.5", "--algorithm", "sft",
            "--reward", "gsm8k", "--config", str(config), "--output", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["committed_updates"] == 1
    assert (out / "eval_results.json").exists() and (out / "adapter" / "adapter_model.safetensors").exists()
    receipt = json.loads((out / "remote_receipt.json").read_text())
    assert receipt["provider"] == "local" and receipt["spend_usd"] == 0.0
    run_id = receipt["run_id"]
    ledger = state.read_ledger()
    assert [r["outcome"] for r in ledger] == ["collected"] and ledger[0]["run_id"] == run_id
    # the same job again attaches to what exists: no second worker, no second ledger line
    jobs = list((state.state_dir() / "local" / "jobs").iterdir())
    assert main(argv) == 0
    assert list((state.state_dir() / "local" / "jobs").iterdir()) == jobs
    assert main(["train-remote", "--attach", run_id]) == 0
    assert main(["train-remote", "--attach", "sa-unknown"]) == 2
    capsys.readouterr()
    assert main(["costs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["run_id"] == run_id
    # chat with the collected adapter through stdin, as `chat` does, served by evaluator:chat in a subprocess
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("what is 7 + 8\n/quit\n"))
    assert main(["chat-remote", "--provider", "local", "--run", run_id, "--max-cost", "0.5"]) == 0
    assert capsys.readouterr().out.count("assistant> ") == 1
    chats = [r for r in state.read_ledger() if r["kind"] == "chat"]
    assert [(r["run_id"], r["spend_usd"], r["max_cost_usd"]) for r in chats] == [(run_id, 0.0, 0.5)]
    assert main(["chat-remote", "--provider", "local", "--run", run_id, "--max-cost", "0"]) == 2  # no cap, no chat


def test_plan_only_then_detached_launch_then_cancel(tiny_model, tmp_path, capsys):
    data, prompts, config = _write_inputs(tmp_path)
    (tmp_path / "remote.yaml").write_text(f"dataset: curated.jsonl\nbase_model: {tiny_model}\nreward: gsm8k\n"
                                          "max_cost_usd: 1\ntraining: {steps: 50, batch_size: 2}\n")
    assert main(["finetune", "validate", "--config", str(config)]) == 0
    ws = tmp_path / "ws"
    assert main(["finetune", "prepare", "--config", str(config), "--workspace", str(ws)]) == 0
    plan = json.loads((ws / "plan.json").read_text())
    assert plan["worst_case_usd"] == 0.0 and plan["quote"]["source"].startswith("local price table")
    assert main(["finetune", "launch", str(ws), "--detach"]) == 0
    run_id = plan["run_id"]
    job = state.state_dir() / "local" / "jobs" / run_id
    for _ in range(200):
        if (job / "status.json").exists():
            break
        time.sleep(0.05)
    assert main(["train-remote", "--cancel", run_id]) == 0
    assert state.load_record(run_id)["phase"] == "cancelled"
    assert json.loads((job / "status.json").read_text())["state"] in ("terminated", "failed", "succeeded")
    capsys.readouterr()
    assert main(["costs", "--orphans", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_validate_reports_every_error_with_its_path(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("provider: aws\ngpus: 0\nmax_hours: -1\ntraining: 3\ndataset: missing.jsonl\n")
    assert main(["finetune", "validate", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    for where in ("provider:", "gpus:", "max_hours:", "training:", "dataset: file not found"):
        assert where in err
    assert main(["finetune", "schema"]) == 0
    assert "max_cost_usd" in json.loads(capsys.readouterr().out)["properties"]


def test_zero_cap_is_refused_before_anything(tmp_path, capsys):
    data, _, _ = _write_inputs(tmp_path)
    assert main(["train-remote", "--dataset", str(data), "--max-cost", "0"]) == 2
    assert "max_cost_usd" in capsys.readouterr().err
    assert not (state.state_dir() / "workspaces").exists() or not any((state.state_dir() / "workspaces").iterdir())
