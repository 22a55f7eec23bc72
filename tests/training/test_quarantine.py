"""Quarantine: each way an update or a restore can break part-way, injected into a run of the tiny model. Each
asserts the run is quarantined and reported as completed nowhere (manifest, failed event, TrainingFailed, run
state), that --resume is refused, and that --reload continues to the same adapter and update digests as an
uninterrupted run. A failure that changes nothing (integrity, before backward) stays a plain failure."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch

from stateset_agents.core.errors import InputError
from stateset_agents.plugin_api import checkpoints as ck
from stateset_plugins.trainers.api import TRAINERS, Quarantined, TrainingFailed
from tests.helpers.toy_rewards import FAST, DigitReward, NaNReward, make_rows

STEPS = 4  # checkpoints at 2 and 4 (FAST saves every 2)


def _build(tiny_model_dir, output, *, algo="grpo", resume=False, reload=False, overwrite=False, reward=None,
           **config):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = {**FAST, "steps": STEPS, **config}
    return TRAINERS[algo](AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                          AutoTokenizer.from_pretrained(tiny_model_dir), reward=reward or DigitReward(),
                          dataset=make_rows(), config=cfg, output_dir=output, resume=resume, reload=reload,
                          overwrite=overwrite, base_model_info={"source": "local", "path": str(tiny_model_dir)})


@pytest.fixture()
def build(tiny_model_dir):
    return lambda output, **kw: _build(tiny_model_dir, output, **kw)


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory):
    """An uninterrupted run: its adapter bytes and committed update digests."""
    out = tmp_path_factory.mktemp("reference") / "run"
    _build(tiny_model_dir, out).train()
    return {"adapter": (out / ck.ADAPTER_WEIGHTS).read_bytes(),
            "updates": [r["update_sha256"] for r in ck.committed_receipts(ck.read_receipts(out))],
            "batches": [r["batch_sha256"] for r in ck.committed_receipts(ck.read_receipts(out))]}


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def _assert_quarantined(run: Path, event: dict, *, cause: str, update: int, last_good: int | None) -> dict:
    assert event["type"] == "failed" and event["reason"] == "quarantined" and event["cause"] == cause
    assert event["quarantined"] is True and event["update"] == update
    assert ("--reload" if last_good is not None else "--overwrite") in event["message"]
    record = ck.quarantine(run)
    assert record["reason"] == cause and record["step"] == update and record["last_good_checkpoint"] == last_good
    assert record["at"] > 0 and record["message"]
    manifest = _manifest(run)
    assert manifest["status"] == "quarantined" and manifest["adapter"] is None
    assert manifest["quarantine"]["reason"] == cause and manifest["failure"]["reason"] == "quarantined"
    assert not (run / "adapter").exists() and ck.run_state(run) == "quarantined"
    # the receipts stay consistent with the manifest even so
    assert ck.verify_receipts(run, manifest) == []
    return record


def _refuses_resume(build, run: Path) -> None:
    with pytest.raises(InputError, match="quarantined.*--reload") as err:
        build(run, resume=True)
    assert err.value.path == str(run / ck.QUARANTINE_FILE)


def _reload_matches(build, run: Path, reference: dict, *, checkpoint: int) -> dict:
    trainer = build(run, reload=True)
    logs = [e for e in trainer.events() if e["type"] in ("log", "completed", "failed")]
    done = logs[-1]
    assert done["type"] == "completed" and done["step"] == STEPS
    assert any(f"reloaded checkpoint {checkpoint}" in e.get("message", "") for e in logs)
    assert (run / ck.ADAPTER_WEIGHTS).read_bytes() == reference["adapter"]
    committed = ck.committed_receipts(ck.read_receipts(run))
    assert [r["update_sha256"] for r in committed] == reference["updates"]
    assert [r["batch_sha256"] for r in committed] == reference["batches"]
    manifest = _manifest(run)
    assert manifest["status"] == "completed" and manifest["quarantine"] is None
    assert ck.verify_receipts(run, manifest) == [] and ck.run_state(run) == "completed"
    assert ck.quarantine(run) is None
    (resolved,) = ck.quarantine_history(run)
    assert resolved["resolution"]["by"] == "reload" and resolved["resolution"]["step"] == checkpoint
    assert set(resolved["resolution"]["files"]) >= {ck.ADAPTER_WEIGHTS, "training_state.pt"}
    return resolved


def test_optimizer_step_raising_after_backward(build, reference, tmp_path):
    run = tmp_path / "run"
    trainer = build(run)
    real, calls = trainer.backend.optimizer_step, []

    def breaks_on_the_third(**kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("device lost")
        return real(**kw)

    trainer.backend.optimizer_step = breaks_on_the_third
    with pytest.raises(TrainingFailed) as err:
        trainer.train()
    event = err.value.event
    assert event["step"] == 2 and "RuntimeError during step: device lost" in event["message"]
    _assert_quarantined(run, event, cause="partial_update", update=3, last_good=2)
    last = ck.read_receipts(run)[-1]
    assert last["step"] == 3 and last["committed"] is False and last["failure"] == "partial_update"
    _refuses_resume(build, run)
    resolved = _reload_matches(build, run, reference, checkpoint=2)
    assert resolved["resolution"]["receipts_dropped"] == 1  # the uncommitted attempt, kept in the history


@pytest.mark.parametrize("algo, changed", [("grpo", False), ("ppo", True)])
def test_non_finite_gradients(build, reference, tmp_path, algo, changed):
    run = tmp_path / "run"
    trainer = build(run, algo=algo)
    real, calls = trainer.backend.forward_backward, []

    def nan_gradients_on_the_third(*a, **kw):
        stats = real(*a, **kw)
        calls.append(1)
        if len(calls) == 3:
            for p in trainer.backend._trainable:
                p.grad.fill_(float("nan"))
        return stats

    trainer.backend.forward_backward = nan_gradients_on_the_third
    event = list(trainer.events())[-1]
    _assert_quarantined(run, event, cause="non_finite_gradient", update=3, last_good=2)
    # PPO's value head steps before the policy's gradient norm is checked: a partial update, and the receipt shows it
    assert ck.quarantine(run)["parameters_changed"] is changed
    assert ck.read_receipts(run)[-1]["parameters_changed"] is changed
    _refuses_resume(build, run)
    if algo == "grpo":
        _reload_matches(build, run, reference, checkpoint=2)


def test_checkpoint_write_failing_mid_write(build, reference, tmp_path):
    run = tmp_path / "run"
    trainer = build(run)
    real, calls = trainer.backend.training_state, []

    def disk_full_on_the_second(*a, **kw):  # the adapter is written, the training state is not
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*a, **kw)

    trainer.backend.training_state = disk_full_on_the_second
    events = list(trainer.events())
    assert not any(e["type"] == "checkpoint" and e["step"] == 4 for e in events)
    record = _assert_quarantined(run, events[-1], cause="checkpoint_write", update=4, last_good=2)
    assert "No space left on device" in record["message"]
    assert [p.name for p in ck.checkpoint_dirs(run)] == ["step-000002"]  # no half checkpoint counts
    assert len(ck.committed_receipts(ck.read_receipts(run))) == 4 == _manifest(run)["committed_updates"]
    _refuses_resume(build, run)
    _reload_matches(build, run, reference, checkpoint=2)


def test_corrupted_training_state_on_resume(build, reference, tmp_path):
    run = tmp_path / "run"
    stop = threading.Event()
    trainer = build(run)
    trainer.engine._stop = stop
    events = []
    for e in trainer.events():
        events.append(e)
        if e["type"] == "metrics" and e["step"] == 3:
            stop.set()
    assert events[-1]["reason"] == "interrupted" and _manifest(run)["status"] == "stopped"
    assert ck.run_state(run) == "stopped" and ck.quarantine(run) is None
    blob = run / "checkpoints" / "step-000003" / "training_state.pt"
    blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])  # a torn file
    with pytest.raises(Quarantined) as err:  # the adapter was loaded, the optimizer was not: a mixed state
        build(run, resume=True)
    assert isinstance(err.value, TrainingFailed)
    record = _assert_quarantined(run, err.value.event, cause="restore", update=3, last_good=2)
    assert record["checkpoint"] == "step-000003"
    _refuses_resume(build, run)
    resolved = _reload_matches(build, run, reference, checkpoint=2)
    (aside,) = resolved["resolution"]["set_aside"]
    assert aside.endswith("step-000003") and (run / aside / "training_state.pt").exists()


def test_reload_needs_a_complete_checkpoint(build, tmp_path):
    run = tmp_path / "run"
    trainer = build(run)
    trainer.backend.optimizer_step = lambda **kw: (_ for _ in ()).throw(RuntimeError("boom"))
    event = list(trainer.events())[-1]
    _assert_quarantined(run, event, cause="partial_update", update=1, last_good=None)
    assert "no checkpoint to reload" in event["message"]
    with pytest.raises(InputError, match="--reload: no complete checkpoint"):
        build(run, reload=True)
    # a checkpoint from before receipts (no file digests) is not complete either
    other = tmp_path / "old"
    build(other).train()
    for path in ck.checkpoint_dirs(other):
        state = json.loads((path / "state.json").read_text())
        del state["files"]
        (path / "state.json").write_text(json.dumps(state))
    assert not any(r["complete"] for r in ck.checkpoint_table(other))
    with pytest.raises(InputError, match="no complete checkpoint"):
        build(other, reload=True)
    with pytest.raises(InputError, match="--reload and --overwrite"):
        build(other, reload=True, overwrite=True)


def test_a_failure_before_backward_stays_failed(build, tmp_path):
    run = tmp_path / "run"
    event = list(build(run, reward=NaNReward()).events())[-1]
    assert event["reason"] == "integrity" and "quarantined" not in event
    assert _manifest(run)["status"] == "failed" and ck.run_state(run) == "failed" and ck.quarantine(run) is None
    (receipt,) = ck.read_receipts(run)
    assert receipt["committed"] is False and receipt["failure"] == "integrity" and receipt["parameters_changed"] is False


def test_quarantined_runs_are_never_deployed_nominated_or_gated(build, tmp_path, capsys):
    from stateset_agents.pipeline.deploy import deploy
    from stateset_agents.pipeline.gate import _read_run
    from stateset_agents.pipeline.nomination import nominate
    from stateset_agents.pipeline.report import render_report

    run = tmp_path / "run"
    trainer = build(run)
    real, calls = trainer.backend.optimizer_step, []

    def breaks_on_the_third(**kw):
        calls.append(1)
        if len(calls) == 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real(**kw)

    trainer.backend.optimizer_step = breaks_on_the_third
    list(trainer.events())
    for refuse, doing in ((lambda: deploy(run, tmp_path / "registry", force=True), "deployed"),
                          (lambda: nominate(run, 2), "nominated"), (lambda: _read_run(run), "gated")):
        with pytest.raises(ck.RunQuarantined, match=f"quarantined .*never {doing}.*--reload"):
            refuse()
    assert not (tmp_path / "registry").exists()
    page = render_report(run)
    assert 'id="quarantine"' in page and "QUARANTINED: partial_update at update 3" in page
    assert "status quarantined" in page and "status completed" not in page
    from stateset_agents.cli import main

    assert main(["lineage", "--json", str(run)]) == 0  # consistent records, an unfinished run: shown, not broken
    (chain,) = json.loads(capsys.readouterr().out)
    assert chain["manifest"]["status"] == "quarantined" and chain["receipts"]["state"] == "quarantined"
    assert chain["receipts"]["quarantine"]["reason"] == "partial_update" and chain["receipts"]["verified"] is True
    assert any("the run is quarantined" in w["message"] for w in chain["warnings"])
    assert main(["lineage", str(run)]) == 0
    assert "QUARANTINED (partial_update at update 3" in capsys.readouterr().out
    # even a manifest that claims completion does not get past quarantine.json
    manifest = _manifest(run)
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "completed"}))
    with pytest.raises(ck.RunQuarantined):
        nominate(run, 2)


def test_train_command_refuses_resume_of_a_quarantined_run_and_reloads(tiny_model_dir, tmp_path, capsys):
    from stateset_agents.cli import main
    from tests.helpers.toy_rewards import write_rows

    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    config = tmp_path / "train.yaml"
    config.write_text("max_new_tokens: 8\nbatch_size: 2\nnum_generations: 2\n")
    run = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--algorithm", "grpo", "--reward", "gsm8k", "--base-model",
            str(tiny_model_dir), "--output", str(run), "--steps", "2", "--save-every", "1", "--config", str(config)]
    assert main(argv) == 0
    first = (run / ck.ADAPTER_WEIGHTS).read_bytes()
    (run / "checkpoints" / "step-000002" / "training_state.pt").write_bytes(b"not a pickle")
    capsys.readouterr()
    assert main(argv + ["--resume"]) != 0
    err = capsys.readouterr().err.replace("\n", " ")
    assert "training quarantined" in err and "--reload" in err
    assert _manifest(run)["status"] == "quarantined" and ck.run_state(run) == "quarantined"
    assert main(argv + ["--resume"]) != 0
    err = capsys.readouterr().err.replace("\n", " ")
    assert "quarantine.json" in err and "--reload" in err
    assert main(argv + ["--reload"]) == 0
    assert _manifest(run)["status"] == "completed" and ck.run_state(run) == "completed"
    assert (run / ck.ADAPTER_WEIGHTS).read_bytes() == first  # checkpoint 1, then update 2 again: the same weights
