"""`--init-adapter`: RL from an SFT parent, with the parent in the lineage and exact resume; and checkpoint
validation that leaves training exactly as it would be without it."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from stateset_agents.core.jsonio import sha256_file
from stateset_plugins.trainers.run import train_run
from tests.helpers.toy_rewards import DigitReward, make_rows, write_rows

CONFIG = {"max_new_tokens": 8, "batch_size": 2, "num_generations": 2, "learning_rate": 2e-2, "save_every": 1}


def write_validation(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": f"v{i}", "split": "validation",
                                        "prompt": [{"role": "user", "content": text}]}) + "\n"
                            for i, text in enumerate(["zebra crossing seventeen", "a quiet harbour at dawn", "which planet is red"])))
    return path


def request(tiny_model_dir, tmp_path, out, algorithm="grpo", **more):
    data = tmp_path / "curated.jsonl"
    if not data.exists():
        write_rows(data, make_rows())
    config = {k: v for k, v in CONFIG.items() if algorithm != "sft" or k != "num_generations"}
    return {"algorithm": algorithm, "dataset": str(data), "base_model": str(tiny_model_dir), "output": str(out),
            "config": config, "steps": 3, "eval": {"max_new_tokens": 12}, **more}


def run(req, stop=None, on_event=None):
    events = []
    for event in train_run(req, reward=DigitReward(), stop=stop):
        events.append(event)
        if on_event:
            on_event(event)
    return events


def test_rl_from_an_sft_parent_records_the_parent_and_resumes_exactly(tiny_model_dir, tmp_path):
    parent = tmp_path / "sft"
    assert run(request(tiny_model_dir, tmp_path, parent, "sft", steps=2))[-1]["type"] == "completed"
    parent_manifest = json.loads((parent / "manifest.json").read_text())
    validation = write_validation(tmp_path / "validation.jsonl")

    child = request(tiny_model_dir, tmp_path, tmp_path / "child", init_adapter=str(parent / "adapter"),
                    eval_prompts=str(validation))
    assert run(child)[-1]["type"] == "completed"
    manifest = json.loads((tmp_path / "child" / "manifest.json").read_text())
    assert manifest["parent"]["run_id"] == parent_manifest["run_id"]
    assert manifest["parent"]["adapter_sha256"] == sha256_file(parent / "adapter" / "adapter_model.safetensors")
    assert manifest["parent"]["manifest_sha256"] == sha256_file(parent / "manifest.json")
    assert manifest["schema_version"] == 3

    # the parent's weights were the start: the same run from a fresh LoRA ends elsewhere
    fresh = request(tiny_model_dir, tmp_path, tmp_path / "fresh", eval_prompts=str(validation))
    assert run(fresh)[-1]["type"] == "completed"
    child_bytes = (tmp_path / "child" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert child_bytes != (tmp_path / "fresh" / "adapter" / "adapter_model.safetensors").read_bytes()

    # stopped after the first checkpoint, then resumed: the same bytes as the uninterrupted run
    stop = threading.Event()
    interrupted = request(tiny_model_dir, tmp_path, tmp_path / "resumed", init_adapter=str(parent / "adapter"),
                          eval_prompts=str(validation))
    events = run(interrupted, stop=stop, on_event=lambda e: stop.set() if e.get("type") == "checkpoint" else None)
    assert events[-1]["type"] == "failed" and events[-1]["reason"] == "interrupted"
    # as if killed between saving checkpoint 1 and validating it: the resume validates it
    (tmp_path / "resumed" / "checkpoint_validation.jsonl").write_text("")
    assert run({**interrupted, "resume": True})[-1]["type"] == "completed"
    assert (tmp_path / "resumed" / "adapter" / "adapter_model.safetensors").read_bytes() == child_bytes
    resumed_records = (tmp_path / "resumed" / "checkpoint_validation.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in resumed_records] == [1, 2, 3]

    # a checkpoint never continues under another parent
    other = run({**interrupted, "resume": True, "init_adapter": str(tmp_path / "fresh" / "adapter")})
    assert other[-1]["type"] == "failed" and "init_adapter_sha256" in other[-1]["message"]


def test_checkpoint_validation_does_not_change_training(tiny_model_dir, tmp_path):
    """The validation evaluation runs between updates; it saves and restores the RNG, so the updates are the
    same as without it."""
    validation = write_validation(tmp_path / "validation.jsonl")
    with_validation = request(tiny_model_dir, tmp_path, tmp_path / "a", eval_prompts=str(validation))
    without = request(tiny_model_dir, tmp_path, tmp_path / "b", eval_prompts=str(validation),
                      validate_checkpoints=False)
    assert run(with_validation)[-1]["type"] == "completed" and run(without)[-1]["type"] == "completed"
    assert ((tmp_path / "a" / "adapter" / "adapter_model.safetensors").read_bytes() ==
            (tmp_path / "b" / "adapter" / "adapter_model.safetensors").read_bytes())
    assert (tmp_path / "a" / "checkpoint_validation.jsonl").exists()
    assert not (tmp_path / "b" / "checkpoint_validation.jsonl").exists()


def test_bad_parents_and_test_files_fail_before_the_model_loads(tiny_model_dir, tmp_path):
    events = run(request(tiny_model_dir, tmp_path, tmp_path / "x", init_adapter=str(tmp_path / "nowhere")))
    assert events[-1]["type"] == "failed" and "--init-adapter needs an adapter directory" in events[-1]["message"]
    test_file = tmp_path / "test.jsonl"
    test_file.write_text(json.dumps({"id": "t", "split": "test", "prompt": "hi"}) + "\n")
    events = run(request(tiny_model_dir, tmp_path, tmp_path / "y", eval_prompts=str(test_file)))
    assert events[-1]["type"] == "failed" and "validation file only" in events[-1]["message"]
    assert len(events) == 1  # refused before anything loaded
    events = run({**request(tiny_model_dir, tmp_path, tmp_path / "z"), "dataset": str(test_file)})
    assert events[-1]["type"] == "failed" and "this is a test file" in events[-1]["message"]


def test_train_remote_refuses_a_split_file_as_its_dataset(tmp_path):
    from stateset_agents.remote import config as cfg

    validation = write_validation(tmp_path / "validation.jsonl")
    errors = dict(cfg.validation_errors({"dataset": str(validation), "provider": "local", "max_cost_usd": 1}))
    assert "this is a validation file" in errors["dataset"] and "validation.jsonl:1" in errors["dataset"]
    curated = write_rows(tmp_path / "curated.jsonl", make_rows())
    assert "dataset" not in dict(cfg.validation_errors({"dataset": str(curated), "provider": "local",
                                                        "max_cost_usd": 1}))


@pytest.mark.parametrize("bad", ["samples", "temperature"])
def test_the_evaluation_protocol_is_checked_before_the_model_loads(tiny_model_dir, tmp_path, bad):
    protocol = {"samples": 0} if bad == "samples" else {"samples": 2, "temperature": 0.0}
    events = run(request(tiny_model_dir, tmp_path, tmp_path / "p", eval=protocol))
    assert len(events) == 1 and events[0]["type"] == "failed" and bad in events[0]["message"]


def test_train_command_flags_for_the_parent_and_the_protocol(tiny_model_dir, tmp_path, capsys):
    from stateset_agents.cli import main

    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    validation = write_validation(tmp_path / "validation.jsonl")
    config = tmp_path / "c.yaml"
    config.write_text("max_new_tokens: 8\nbatch_size: 2\n")
    base = ["train", "--dataset", str(data), "--reward", "gsm8k", "--base-model", str(tiny_model_dir), "--steps", "1",
            "--config", str(config)]
    assert main(base + ["--algorithm", "sft", "--output", str(tmp_path / "sft")]) == 0
    capsys.readouterr()
    child = base + [
        "--output", str(tmp_path / "rl"), "--init-adapter", str(tmp_path / "sft" / "adapter"), "--eval-prompts",
        str(validation), "--eval-max-new-tokens", "12", "--samples", "2", "--eval-temperature", "0.8"]
    assert main(child) == 0
    out = capsys.readouterr().out
    assert "best on validation" in out and "nominate" in out
    manifest = json.loads((tmp_path / "rl" / "manifest.json").read_text())
    assert manifest["parent"]["run_id"] == json.loads((tmp_path / "sft" / "manifest.json").read_text())["run_id"]
    protocol = manifest["selection"]["protocol"]
    assert (protocol["samples"], protocol["temperature"], protocol["max_new_tokens"]) == (2, 0.8, 12)
    assert json.loads((tmp_path / "rl" / "eval_results.json").read_text())["protocol"] == protocol


def test_train_remote_carries_the_parent_and_the_protocol(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """provider:local end to end: the parent adapter and its manifest travel in the workspace, the worker starts
    from them, and the evaluation protocol of the config reaches the run."""
    from stateset_agents.cli import main

    monkeypatch.setenv("STATESET_AGENTS_STATE_DIR", str(tmp_path / "state"))
    parent = tmp_path / "sft"
    assert run(request(tiny_model_dir, tmp_path, parent, "sft", steps=1))[-1]["type"] == "completed"
    validation = write_validation(tmp_path / "validation.jsonl")
    config = tmp_path / "remote.yaml"
    config.write_text("training: {steps: 1, batch_size: 2, max_new_tokens: 4, num_generations: 2}\n"
                      "eval: {max_new_tokens: 6}\n")
    out = tmp_path / "runs" / "r1"
    argv = ["train-remote", "--provider", "local", "--dataset", str(tmp_path / "curated.jsonl"), "--base-model",
            str(tiny_model_dir), "--eval-prompts", str(validation), "--max-cost", "1", "--max-hours", "0.5",
            "--algorithm", "grpo", "--reward", "gsm8k", "--config", str(config), "--output", str(out),
            "--init-adapter", str(parent / "adapter")]
    assert main(argv) == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    parent_manifest = json.loads((parent / "manifest.json").read_text())
    assert manifest["parent"]["run_id"] == parent_manifest["run_id"]
    assert manifest["parent"]["adapter_sha256"] == parent_manifest["adapter"]["sha256"]
    assert json.loads((out / "eval_results.json").read_text())["protocol"]["max_new_tokens"] == 6
    test_file = tmp_path / "test.jsonl"
    test_file.write_text(json.dumps({"id": "t", "split": "test", "prompt": "hi"}) + "\n")
    capsys.readouterr()
    assert main(argv[:8] + [str(test_file)] + argv[9:] + ["--new-run"]) == 2
    assert "this is a test file" in capsys.readouterr().err.replace("\n", " ")


def test_a_parent_fits_the_same_base_model_wherever_its_file_lies():
    """The same GGUF (same sha256) installed at another path is the same base model; another file is not."""
    from stateset_agents.core.errors import InputError
    from stateset_plugins.trainers.parent import InitAdapter

    gguf = {"source": "gguf", "name": "m.gguf", "path": "/venv-a/m.gguf", "gguf_sha256": "ab" * 32}
    parent = InitAdapter(Path("/runs/sft/adapter"), "cd" * 32, None)
    parent.manifest = {"base_model": gguf}
    parent.check_base_model({**gguf, "path": "/venv-b/m.gguf"})
    with pytest.raises(InputError, match="fits only its own base model"):
        parent.check_base_model({**gguf, "gguf_sha256": "ef" * 32})
    parent.manifest = {"base_model": {"source": "local", "path": "/models/a"}}
    with pytest.raises(InputError, match="fits only its own base model"):
        parent.check_base_model({"source": "local", "path": "/models/b"})
