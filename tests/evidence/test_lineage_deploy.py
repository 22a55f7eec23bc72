"""Lineage round trip and tamper detection for each artifact; deploy and the registry."""
from __future__ import annotations

import json
import shutil

import pytest

from stateset_agents.cli import main
from stateset_agents.core.jsonio import write_json
from stateset_agents.plugin_api.lineage import seal
from tests.evidence.evidence_helpers import train
from tests.evidence.test_gate import fabricate_scores


@pytest.fixture()
def private_run(tiny_model_dir, workspace, tmp_path):
    """A run over a private copy of the workspace, so its dataset and log may be changed."""
    ws = tmp_path / "ws"
    shutil.copytree(workspace, ws)
    rows = [json.loads(line) for line in (ws / "curated.jsonl").read_text().splitlines()]
    for row in rows:
        row["lineage"]["source_path"] = str(ws / "support_log.jsonl")
    (ws / "curated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return train(tiny_model_dir, ws, tmp_path / "run", 0), ws


def flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-2] ^= 1
    path.write_bytes(bytes(data))


def lineage_json(capsys, *args):
    rc = main(["lineage", "--json", *map(str, args)])
    captured = capsys.readouterr()
    return rc, json.loads(captured.out), captured.err


def test_round_trip_from_adapter_to_log_lines(private_run, capsys):
    run, ws = private_run
    rc, [chain], _ = lineage_json(capsys, run)
    assert rc == 0 and chain["ok"] and chain["problems"] == []
    assert chain["adapter"]["verified"] is True and len(chain["adapter"]["sha256"]) == 64
    assert chain["manifest"]["algorithm"] == "grpo" and chain["manifest"]["seed"] == 0
    assert chain["manifest"]["committed_updates"] == 2 and chain["manifest"]["base_model"]
    assert chain["dataset"]["verified"] is True and chain["dataset"]["rows"] == 6
    log = str(ws / "support_log.jsonl")
    assert [(r["dataset_line"], r["conversation_id"], r["source_path"], r["line"]) for r in chain["rows"]] == [
        (i + 1, f"c{i}", log, i + 1) for i in range(6)]
    assert chain["sources"][log]["verified"] is True
    assert main(["lineage", str(run)]) == 0
    out = capsys.readouterr().out
    assert "conversation c3" in out and "support_log.jsonl" in out


@pytest.mark.parametrize("artifact", ["adapter", "dataset", "source log"])
def test_a_changed_byte_breaks_the_lineage_naming_the_file(private_run, capsys, artifact):
    run, ws = private_run
    path = {"adapter": run / "adapter" / "adapter_model.safetensors", "dataset": ws / "curated.jsonl",
            "source log": ws / "support_log.jsonl"}[artifact]
    flip_last_byte(path)
    rc, [chain], err = lineage_json(capsys, run)
    assert rc == 4 and not chain["ok"]
    assert [p["path"] for p in chain["problems"]] == [str(path)]
    assert str(path) in err and "changed" in err


def test_a_changed_manifest_is_caught_by_its_seal_promotion_and_registry_entry(private_run, run_copy, tmp_path,
                                                                               capsys):
    run, _ = private_run
    # sealed by the trainer (see pipeline.lineage.seal)
    manifest_path = run / "manifest.json"
    write_json(manifest_path, seal(json.loads(manifest_path.read_text())))
    assert main(["lineage", str(run)]) == 0
    manifest = json.loads(manifest_path.read_text())
    manifest["seed"] = 7
    manifest_path.write_text(json.dumps(manifest))
    assert main(["lineage", str(run)]) == 4
    assert "manifest.json" in capsys.readouterr().err

    # unsealed, but cited by promotion.json
    promoted = [run_copy(0, "p0"), run_copy(1, "p1")]
    for r in promoted:
        fabricate_scores(r, [0.3] * 6)
    from stateset_agents.pipeline.gate import run_gate

    prompts = tmp_path / "held.txt"
    shutil.copy(private_run[1] / "held_out.txt", prompts)
    assert run_gate(promoted, prompts, "toy_digits", tmp_path / "gate", min_seeds=2)["promoted"]
    assert main(["deploy", str(promoted[0]), "--to", str(tmp_path / "registry")]) == 0
    entry = tmp_path / "registry" / "p0"
    assert main(["lineage", str(entry)]) == 0
    capsys.readouterr()
    for target in (promoted[0], entry):
        text = (target / "manifest.json").read_text()
        (target / "manifest.json").write_text(text.replace('"seed": 0', '"seed": 5', 1))
        assert main(["lineage", str(target)]) == 4
        assert "manifest.json" in capsys.readouterr().err
    # promotion.json itself is sealed by the gate
    flip = json.loads((promoted[1] / "promotion.json").read_text())
    flip["promoted"] = not flip["promoted"]
    (promoted[1] / "promotion.json").write_text(json.dumps(flip))
    assert main(["lineage", str(promoted[1])]) == 4
    assert "promotion.json" in capsys.readouterr().err


def test_deploy_refuses_an_unpromoted_run_unless_forced(run_copy, tmp_path, capsys):
    run = run_copy(0)
    registry = tmp_path / "registry"
    assert main(["deploy", str(run), "--to", str(registry)]) == 5
    assert "not promoted" in capsys.readouterr().err
    assert not registry.exists() or not any(registry.iterdir())
    assert main(["deploy", str(run), "--to", str(registry), "--force"]) == 0
    entry = json.loads((registry / run.name / "entry.json").read_text())
    assert entry["forced"] is True and "no promotion.json" in entry["force_reason"]
    assert (registry / run.name / "adapter" / "adapter_model.safetensors").exists()
    assert set(entry["files"]) >= {"manifest.json", "adapter/adapter_model.safetensors", "eval_results.json"}
    assert [p.name for p in registry.iterdir()] == [run.name]  # no temporary folder left behind
    assert main(["deploy", str(run), "--to", str(registry), "--force"]) == 2  # the name is taken
    capsys.readouterr()
    rc, [chain], _ = lineage_json(capsys, registry / run.name)
    assert rc == 0 and chain["kind"] == "registry" and chain["deployment"]["forced"] is True
    flip_last_byte(registry / run.name / "adapter" / "adapter_config.json")  # not in the manifest, in the entry
    rc, [chain], err = lineage_json(capsys, registry / run.name)
    assert rc == 4 and "adapter_config.json" in err


def test_which_adapters_did_a_conversation_train(trained_runs, run_copy, tmp_path, capsys):
    registry = tmp_path / "registry"
    assert main(["deploy", str(run_copy(1, "r1")), "--to", str(registry), "--force"]) == 0
    capsys.readouterr()
    runs_folder = trained_runs[0].parent
    assert main(["lineage", str(runs_folder), str(registry), "--conversation", "c3", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert sorted(h["target"] for h in hits) == sorted([*(str(r) for r in trained_runs), str(registry / "r1")])
    assert all(h["rows"][0]["dataset_line"] == 4 and len(h["adapter_sha256"]) == 64 for h in hits)
    assert main(["lineage", str(runs_folder), "--conversation", "nobody"]) == 1
