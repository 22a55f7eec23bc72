"""`improve status`, and the same outputs whichever runtime serves the reward."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from stateset_agents.cli import main
from tests.improve.improve_helpers import chat, write_transcripts


def make_run(tmp_path, *extra: str):
    convs = [chat(f"c{i}", f"question {i}", "GOOD" if i % 3 else "BAD", "thanks", "OKAY") for i in range(40)]
    logs = tmp_path / "in"
    write_transcripts(logs, convs)
    out = tmp_path / "out"
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output", str(out),
                 *extra]) == 0
    return logs, out


def test_status_shows_the_summary_and_checks_the_files(tmp_path, capsys):
    _, out = make_run(tmp_path)
    capsys.readouterr()
    assert main(["improve", "status", str(out)]) == 0
    text = capsys.readouterr().out
    assert "reward:improve_toy 1.2.0" in text and "conversations" in text and "curated.jsonl" in text
    assert text.strip().splitlines()[-1].startswith("stateset-agents train --dataset ")

    assert main(["improve", "status", str(out), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["counts"]["conversations"] == 40
    assert {name: info["state"] for name, info in status["outputs"].items()} == {
        "graded.jsonl": "ok", "curated.jsonl": "ok", "validation.jsonl": "ok", "test.jsonl": "ok"}

    with open(out / "curated.jsonl", "ab") as f:
        f.write(b"{}\n")
    (out / "test.jsonl").unlink()
    assert main(["improve", "status", str(out), "--json"]) == 0
    states = {name: info["state"] for name, info in json.loads(capsys.readouterr().out)["outputs"].items()}
    assert states == {"graded.jsonl": "ok", "curated.jsonl": "changed", "validation.jsonl": "ok",
                      "test.jsonl": "missing"}


def test_a_schema_1_folder_still_reads_and_says_how_to_convert(tmp_path, capsys):
    """A folder from the previous release (one held_out.jsonl, summary schema 1) still shows its status, with a note
    saying how to get validation and test files; its held_out.jsonl still loads as evaluation prompts."""
    from stateset_agents.plugin_api.datasets import load_eval_prompts

    logs, out = make_run(tmp_path)
    summary = json.loads((out / "improve_summary.json").read_text())
    summary["schema_version"] = 1
    held = (out / "validation.jsonl").read_text().replace('"split":"validation",', "")
    (out / "held_out.jsonl").write_text(held)
    summary["outputs"] = {"held_out.jsonl": {"sha256": "", "bytes": len(held.encode()), "rows": 1}}
    for key in ("validation_conversations", "validation_prompts", "test_conversations", "test_prompts"):
        summary["counts"].pop(key)
    (out / "improve_summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(["improve", "status", str(out)]) == 0
    captured = capsys.readouterr()
    assert "held out" in captured.out and "rerun `improve run" in captured.err.replace("\n", "")
    if held:
        cases, role = load_eval_prompts(out / "held_out.jsonl", with_split=True)
        assert cases and role is None
    summary["schema_version"] = 7
    (out / "improve_summary.json").write_text(json.dumps(summary))
    assert main(["improve", "status", str(out)]) == 2
    assert "summary schema 7" in capsys.readouterr().err


def test_status_of_a_folder_without_a_run(tmp_path, capsys):
    assert main(["improve", "status", str(tmp_path)]) == 2
    assert "improve_summary.json: no improve_summary.json here" in capsys.readouterr().err.replace("\n", "")


def test_subprocess_runtime_writes_the_same_files(tmp_path):
    logs, out = make_run(tmp_path, "--batch-size", "7")
    # The whole CLI in a child process, the reward in a grandchild speaking gRPC.
    child = subprocess.run(
        [sys.executable, "-m", "stateset_agents", "improve", "run", "--transcripts", str(logs), "--reward",
         "improve_toy", "--output", str(tmp_path / "sub"), "--runtime", "subprocess", "--batch-size", "7"],
        capture_output=True, text=True, env=os.environ, timeout=120)
    assert child.returncode == 0, child.stderr
    for name in ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl", "next_steps.md"):
        expected = (out / name).read_text().replace(str(out), str(tmp_path / "sub"))
        assert (tmp_path / "sub" / name).read_text() == expected
    summary = json.loads((tmp_path / "sub" / "improve_summary.json").read_text())
    assert summary["runtime"] == "subprocess" and summary["counts"]["turns_graded"] == 80
