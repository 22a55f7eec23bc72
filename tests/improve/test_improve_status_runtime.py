"""`improve status`, and the same outputs whichever runtime serves the reward."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from improve_helpers import chat, write_transcripts
from stateset_agents.cli import main


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
        "graded.jsonl": "ok", "curated.jsonl": "ok", "held_out.jsonl": "ok"}

    with open(out / "curated.jsonl", "ab") as f:
        f.write(b"{}\n")
    (out / "held_out.jsonl").unlink()
    assert main(["improve", "status", str(out), "--json"]) == 0
    states = {name: info["state"] for name, info in json.loads(capsys.readouterr().out)["outputs"].items()}
    assert states == {"graded.jsonl": "ok", "curated.jsonl": "changed", "held_out.jsonl": "missing"}


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
    for name in ("graded.jsonl", "curated.jsonl", "held_out.jsonl", "next_steps.md"):
        expected = (out / name).read_text().replace(str(out), str(tmp_path / "sub"))
        assert (tmp_path / "sub" / name).read_text() == expected
    summary = json.loads((tmp_path / "sub" / "improve_summary.json").read_text())
    assert summary["runtime"] == "subprocess" and summary["counts"]["turns_graded"] == 80
