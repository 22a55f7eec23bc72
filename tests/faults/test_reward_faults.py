"""A reward that is killed, hangs or answers garbage in the middle of `improve run`'s second batch, in every runtime:
the run exits non-zero naming the plugin and the call, reports nothing as done, and the outputs of the last good
run in that folder are untouched (byte for byte, no stray files)."""
from __future__ import annotations

import json
import time

import pytest

from stateset_agents.cli import main
from stateset_agents.core.runtimes import wire

WHO = "reward:test_fault"
BATCH = 4
AT = "c6"  # the middle of the second batch: the first batch was graded and written (to temporary files) already


@pytest.fixture()
def logs(tmp_path):
    folder = tmp_path / "ingested"
    folder.mkdir()
    rows = [{"id": f"c{i}", "messages": [{"role": "user", "content": f"question {i}"},
                                         {"role": "assistant", "content": f"answer {i}"}]} for i in range(12)]
    (folder / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _improve(logs, out, policy_file, runtime: str) -> int:
    return main(["improve", "run", "--transcripts", str(logs), "--reward", WHO, "--output", str(out),
                 "--policy", str(policy_file), "--runtime", runtime, "--batch-size", str(BATCH), "--held-out", "0",
                 "--workers", "1"])


def _policy(tmp_path, **fault) -> str:
    path = tmp_path / f"policy-{fault.get('fault', 'none')}.json"
    path.write_text(json.dumps({**fault, "at": AT} if fault else {}))
    return path


def _snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _fails_closed(tmp_path, logs, capsys, runtime: str, fault: str, *calls: str) -> str:
    """A good run first, then the faulty one into the same folder: it fails, named, and changes nothing."""
    out = tmp_path / "out"
    assert _improve(logs, out, _policy(tmp_path), runtime) == 0
    before = _snapshot(out)
    assert json.loads(before["improve_summary.json"])["counts"]["conversations"] == 12
    capsys.readouterr()
    code = _improve(logs, out, _policy(tmp_path, fault=fault), runtime)
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert code != 0
    assert f"plugin {WHO} failed in" in err and any(call in err for call in calls), err
    assert "Wrote" not in err
    assert _snapshot(out) == before  # nothing half-written, nothing of the failed run promoted
    return err


# ------------------------------------------------------------------------------------------------------ in process

@pytest.mark.parametrize("fault, calls, says", [
    ("raise", ("grade",), "asked to fail at c6"),
    ("wrong_type", ("grade",), "AttributeError"),
    ("nan", ("grade",), "nan"),
    ("wrong_count", ("grade",), "returned 3 grades for 4 assistant turns"),
    ("unencodable", ("grade",), "object"),
])
def test_in_process(tmp_path, logs, capsys, fault, calls, says):
    assert says in _fails_closed(tmp_path, logs, capsys, "inprocess", fault, *calls)


# ------------------------------------------------------------------------------------------------------ subprocess

STREAM = "Reward.GradeStream"


@pytest.mark.parametrize("fault, calls, says", [
    ("die", (STREAM,), "exited with code -9"),
    ("raise", (STREAM,), "asked to fail at c6"),
    ("wrong_type", (STREAM,), "AttributeError"),
    ("nan", ("grade",), "score None"),  # NaN is not JSON: the server's encoder writes null
    ("wrong_count", ("grade",), "returned 3 grades for 4 assistant turns"),
    ("unencodable", (STREAM,), "Type is not JSON serializable"),
    ("malformed", (STREAM,), "grades_jsonl reply"),
])
def test_subprocess(tmp_path, logs, capsys, fault, calls, says):
    assert says in _fails_closed(tmp_path, logs, capsys, "subprocess", fault, *calls)


def test_subprocess_hang_hits_the_deadline(tmp_path, logs, capsys, monkeypatch):
    monkeypatch.setattr(wire, "UNARY_DEADLINE_SECONDS", 2.0)
    started = time.monotonic()
    err = _fails_closed(tmp_path, logs, capsys, "subprocess", "hang", STREAM)
    assert "no answer" in err and "hung" in err
    assert time.monotonic() - started < 30


# ------------------------------------------------------------------------------------------------------- container

@pytest.mark.container
def test_container_killed_mid_batch(tmp_path, logs, capsys, faults_image):
    assert "exited with code" in _fails_closed(tmp_path, logs, capsys, "container", "die", STREAM)
