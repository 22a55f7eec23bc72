"""Receipts and the checkpoint table: `plugin_api.checkpoints` on hand-built run directories (no torch), then on
real runs of the tiny model (the receipts a run writes, `lineage` verifying them)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import dumps_line, sha256_file, write_json
from stateset_agents.plugin_api import checkpoints as ck


def _safetensors(path: Path, tensors: dict[str, bytes]) -> None:
    """A float32 safetensors file of 1-D tensors, written by hand (the format: u64 header length, JSON, data)."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, data in tensors.items():
        header[name] = {"dtype": "F32", "shape": [len(data) // 4], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def _checkpoint(run: Path, step: int, *, learner=ck.LEARNER_STATE, files: bool = True) -> Path:
    path = run / "checkpoints" / f"step-{step:06d}"
    _safetensors(path / ck.ADAPTER_WEIGHTS, {"a": struct.pack("<2f", step, 1.0)})
    (path / "adapter" / "adapter_config.json").write_text("{}")
    (path / "training_state.pt").write_bytes(b"state %d" % step)
    state = {"step": step, "committed_updates": step, "cursor": {}, "algorithm": "sft", "config_digest": "c",
             "dataset_sha256": "d", "base_model": {"source": "hub", "id": "m"}, "run_id": "r",
             "code": {"stateset-agents": "0"}, "learner_state": list(learner)}
    if files:
        state["files"] = ck.checkpoint_files(path)
    write_json(path / "state.json", state)
    return path


def test_checkpoint_table_and_verify(tmp_path):
    run = tmp_path / "run"
    first, second = _checkpoint(run, 2), _checkpoint(run, 4)
    (run / "checkpoints" / ".step-000006.tmp").mkdir()  # a write that never finished is no checkpoint
    (run / ck.VALIDATION_LOG).write_bytes(dumps_line({"step": 2, "split": "validation", "candidate_mean": 0.5,
                                                      "base_mean": 0.25, "cases": 4}) + b'{"step": 4, "spl')
    table = ck.checkpoint_table(run)
    assert [r["step"] for r in table] == [2, 4]
    assert table[0] == {"step": 2, "committed_updates": 2, "path": "checkpoints/step-000002",
                        "sha256": sha256_file(first / ck.ADAPTER_WEIGHTS), "complete": True, "missing": [],
                        "validation": {"mean": 0.5, "split": "validation", "base_mean": 0.25, "cases": 4,
                                       "mean_difference": None}}
    assert table[1]["validation"] is None  # its record is a partial line
    identity = ck.verify_checkpoint(second)
    assert identity["step"] == 4 and identity["run_id"] == "r" and identity["code"] == {"stateset-agents": "0"}
    assert set(identity["files"]) == {ck.ADAPTER_WEIGHTS, "adapter/adapter_config.json", "training_state.pt"}
    assert ck.latest_complete(run) == second

    (second / "training_state.pt").write_bytes(b"corrupted")
    with pytest.raises(InputError, match="training_state.pt sha256 differs") as err:
        ck.verify_checkpoint(second)
    assert err.value.path == str(second / "training_state.pt") and err.value.field == "files"
    row = ck.checkpoint_table(run)[1]
    assert row["complete"] is False and row["missing"][0].startswith("training_state.pt sha256 differs")
    assert ck.latest_complete(run) == first  # the latest one that verifies


def test_incomplete_checkpoints_are_reported_not_crashed_on(tmp_path):
    run = tmp_path / "run"
    old = _checkpoint(run, 1, files=False)  # from before receipts: no digests
    partial = _checkpoint(run, 2, learner=("adapter", "optimizer", "scheduler"))
    gone = _checkpoint(run, 3)
    (gone / "adapter" / "adapter_config.json").unlink()
    rows = {r["step"]: r for r in ck.checkpoint_table(run)}
    assert not any(r["complete"] for r in rows.values())
    assert "records no file digests" in rows[1]["missing"][0]
    assert rows[2]["missing"] == ["state.json holds no rng state (field 'learner_state')",
                                  "state.json holds no data_cursor state (field 'learner_state')"]
    assert rows[3]["missing"] == ["adapter/adapter_config.json is missing"]
    with pytest.raises(InputError, match="records no file digests"):
        ck.verify_checkpoint(old)
    with pytest.raises(InputError, match="holds no rng state") as err:
        ck.verify_checkpoint(partial)
    assert err.value.field == "learner_state"
    assert ck.verify_checkpoint(partial, require=("adapter",))["step"] == 2  # weights only: enough
    assert ck.latest_complete(run) is None


def test_run_state_and_quarantine(tmp_path):
    run = tmp_path / "run"
    assert ck.run_state(run) == "empty"
    _checkpoint(run, 1)
    assert ck.run_state(run) == "running"
    write_json(run / "manifest.json", {"status": "failed", "failure": {"reason": "interrupted"}})
    assert ck.run_state(run) == "stopped"  # a manifest from before the "stopped" status
    for status in ("completed", "stopped", "failed"):
        write_json(run / "manifest.json", {"status": status})
        assert ck.run_state(run) == status
    assert ck.quarantine(run) is None
    record = {"reason": "checkpoint_write", "message": "disk full", "step": 3, "last_good_checkpoint": 1, "at": 1.0}
    write_json(run / ck.QUARANTINE_FILE, record)
    assert ck.quarantine(run) == record and ck.run_state(run) == "quarantined"
    (run / ck.QUARANTINE_FILE).write_text("[]")
    with pytest.raises(InputError, match="must be an object"):
        ck.quarantine(run)


def _receipts(run: Path, records: list[dict]) -> list[bytes]:
    lines, prev = [], None
    for rec in records:
        line = dumps_line({**rec, "prev_sha256": ck.chain_digest(prev)})[:-1]
        lines.append(line)
        prev = line
    (run / ck.RECEIPTS_FILE).write_bytes(b"".join(line + b"\n" for line in lines))
    return lines


def test_verify_receipts(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    weights = {"w": struct.pack("<3f", 1.0, 2.0, 3.0)}
    _safetensors(run / ck.ADAPTER_WEIGHTS, weights)
    final = ck.tensors_digest([("w", "F32", [3], weights["w"])])
    assert ck.safetensors_digest(run / ck.ADAPTER_WEIGHTS) == final
    records = [{"step": 1, "committed": True, "update_sha256": "u1"},
               {"step": 2, "committed": False, "update_sha256": None},
               {"step": 2, "committed": True, "update_sha256": final}]
    lines = _receipts(run, records)
    manifest = {"committed_updates": 2, "adapter": {"path": "adapter"},
                "receipts": {"committed": 2, "last_sha256": ck.chain_digest(lines[-1])}}
    assert ck.verify_receipts(run, manifest) == []
    assert [r["step"] for r in ck.committed_receipts(ck.read_receipts(run))] == [1, 2]

    assert ck.verify_receipts(run, {**manifest, "committed_updates": 3}) == [
        "2 committed receipts, the manifest counts 3 committed updates"]
    # an edited line breaks the chain at the next line
    edited = lines[0].replace(b'"u1"', b'"u9"')
    (run / ck.RECEIPTS_FILE).write_bytes(b"\n".join([edited, *lines[1:]]) + b"\n")
    assert ck.verify_receipts(run, manifest)[0].startswith("receipts.jsonl:2: the chain breaks")
    # a dropped last line: the chain holds, the manifest's citation does not
    (run / ck.RECEIPTS_FILE).write_bytes(b"\n".join(lines[:2]) + b"\n")
    problems = ck.verify_receipts(run, manifest)
    assert "1 committed receipts, the manifest counts 2 committed updates" in problems
    assert any("not the one the manifest cites" in p for p in problems)
    # a gap in the committed steps, and a final adapter that is not the last update
    _receipts(run, [records[0], {"step": 3, "committed": True, "update_sha256": "other"}])
    problems = ck.verify_receipts(run, {"committed_updates": 2, "adapter": {"path": "adapter"}})
    assert problems[0] == "committed steps are not contiguous from 1: committed receipt 2 is step 3, expected 2"
    assert problems[1].startswith("the final adapter's update digest")
    # a run from before receipts has nothing to verify; a manifest that counts receipts needs the file
    (run / ck.RECEIPTS_FILE).unlink()
    assert ck.verify_receipts(run, {"committed_updates": 2}) == []
    assert ck.verify_receipts(run, manifest) == [
        "receipts.jsonl is missing or empty, but the manifest counts receipts"]


# ------------------------------------------------------------------------------------------ on real runs
def _lineage(capsys, run):
    from stateset_agents.cli import main

    rc = main(["lineage", "--json", str(run)])
    out = capsys.readouterr().out
    return rc, json.loads(out)[0]


def test_a_run_writes_receipts_that_lineage_verifies(make_trainer, tmp_path, capsys):
    pytest.importorskip("torch")
    run = tmp_path / "run"
    make_trainer("grpo", run, steps=3).train()
    receipts = ck.read_receipts(run)
    assert [(r["step"], r["committed"], r["phase"]) for r in receipts] == [(s, True, "policy") for s in (1, 2, 3)]
    assert len({r["batch_sha256"] for r in receipts}) == 3 and len({r["update_sha256"] for r in receipts}) == 3
    assert receipts[0]["prev_sha256"] is None
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["schema_version"] == 3 and manifest["committed_updates"] == 3
    assert manifest["receipts"]["committed"] == 3 and manifest["receipts"]["attempted"] == 3
    # the last receipt's update digest is the final adapter, hashed from the file without torch
    assert ck.safetensors_digest(run / ck.ADAPTER_WEIGHTS) == receipts[-1]["update_sha256"]
    rc, chain = _lineage(capsys, run)
    assert rc == 0 and chain["ok"] and chain["receipts"]["verified"] is True
    assert chain["receipts"]["committed"] == 3 and chain["receipts"]["state"] == "completed"
    # each checkpoint records what an exact continuation needs
    state = json.loads((run / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["learner_state"] == list(ck.LEARNER_STATE) and state["committed_updates"] == 2
    assert set(state["files"]) == {"training_state.pt", ck.ADAPTER_WEIGHTS, "adapter/adapter_config.json",
                                   "adapter/README.md"}
    assert set(state["code"]) == {"stateset-agents", "trainer_plugin", "torch", "transformers", "peft"}
    assert ck.safetensors_digest(run / "checkpoints" / "step-000002" / ck.ADAPTER_WEIGHTS) == \
        receipts[1]["update_sha256"]
    assert [r["complete"] for r in ck.checkpoint_table(run)] == [True, True]

    lines = (run / ck.RECEIPTS_FILE).read_bytes().splitlines()
    edited = lines[1].replace(b'"committed":true', b'"committed":false')
    (run / ck.RECEIPTS_FILE).write_bytes(b"\n".join([lines[0], edited, lines[2]]) + b"\n")
    rc, chain = _lineage(capsys, run)
    assert rc == 4 and chain["receipts"]["verified"] is False
    messages = [p["message"] for p in chain["problems"] if p["path"].endswith(ck.RECEIPTS_FILE)]
    assert any("chain breaks" in m for m in messages) and any("2 committed receipts" in m for m in messages)
    (run / ck.RECEIPTS_FILE).write_bytes(b"\n".join(lines[:2]) + b"\n")  # the last line dropped
    rc, chain = _lineage(capsys, run)
    assert rc == 4 and any("not the one the manifest cites" in p["message"] for p in chain["problems"])


def test_sft_and_resumed_runs_keep_one_receipt_per_committed_update(make_trainer, tmp_path):
    import threading

    run, full = tmp_path / "run", tmp_path / "full"
    make_trainer("sft", full, steps=3, save_every=1).train()
    stop = threading.Event()
    trainer = make_trainer("sft", run, steps=3, save_every=1)
    trainer.engine._stop = stop
    for e in trainer.events():
        if e["type"] == "metrics" and e["step"] == 2:
            stop.set()
    with open(run / ck.RECEIPTS_FILE, "ab") as f:
        f.write(b'{"step": 3, "committ')  # a kill mid-line: dropped on resume, the chain continues
    make_trainer("sft", run, steps=3, save_every=1, resume=True).train()
    ours, theirs = ck.read_receipts(run), ck.read_receipts(full)
    assert [r["step"] for r in ours] == [1, 2, 3]
    assert [r["batch_sha256"] for r in ours] == [r["batch_sha256"] for r in theirs]
    assert [r["update_sha256"] for r in ours] == [r["update_sha256"] for r in theirs]
    assert ck.verify_receipts(run, json.loads((run / "manifest.json").read_text())) == []


def test_a_checkpoint_without_receipts_resumes_from_an_origin_line(make_trainer, tmp_path):
    import threading

    run = tmp_path / "run"
    stop = threading.Event()
    trainer = make_trainer("grpo", run, steps=3, save_every=1)
    trainer.engine._stop = stop
    for e in trainer.events():
        if e["type"] == "metrics" and e["step"] == 2:
            stop.set()
    (run / ck.RECEIPTS_FILE).unlink()  # as a run from before receipts, or a checkpoint copied without them
    make_trainer("grpo", run, steps=3, save_every=1, resume=True).train()
    receipts = ck.read_receipts(run)
    assert [(r["step"], r["phase"]) for r in receipts] == [(2, "origin"), (3, "policy")]
    assert ck.receipts_origin(receipts) == 2 and ck.committed_updates(receipts) == 3
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["committed_updates"] == 3 and manifest["receipts"]["attempted"] == 1
    assert ck.verify_receipts(run, manifest) == []
    assert ck.verify_receipts(run, {**manifest, "committed_updates": 4}) == [
        "1 committed receipts after the origin at step 2, the manifest counts 4 committed updates"]
