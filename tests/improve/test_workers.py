"""`improve run --workers N`: grading on N local processes gives the one-process run's bytes, in order; each worker
loads the reward once; a worker that dies is retried once, then the run fails closed."""
from __future__ import annotations

import os
from dataclasses import replace as dataclass_replace

import orjson
import pytest

from stateset_agents.core.errors import InputError, PluginError
from stateset_agents.pipeline.curated_rows import CuratedSink
from stateset_agents.pipeline.grading import Tally
from stateset_agents.pipeline.improve import run_improve
from tests.improve.improve_helpers import chat
from tests.improve.worker_helpers import CHUNK, OUTPUTS, outputs, policy_file, varied_log, with_fault_reward


@pytest.fixture(autouse=True)
def fault_reward(toy_rewards, monkeypatch):
    yield from with_fault_reward(monkeypatch)


def test_workers_write_the_one_process_bytes_in_order(tmp_path, monkeypatch):
    logs = varied_log(tmp_path / "in")
    # Curated rows that fill a field first, after the head, move to the head: the parent decides that across
    # chunks as one process does.
    monkeypatch.setattr(CuratedSink, "EARLY_BYTES", 3000)
    one = run_improve(logs, "improve_toy", tmp_path / "one", held_out_fraction=0.2)
    many = run_improve(logs, "improve_toy", tmp_path / "many", held_out_fraction=0.2, workers=2, chunk_bytes=CHUNK)
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many")
    assert one["counts"] == many["counts"]
    assert one["counts"]["validation_prompts"] and one["counts"]["test_prompts"] and one["counts"]["curated"]
    graded = [orjson.loads(line) for line in (tmp_path / "many" / "graded.jsonl").read_bytes().splitlines()]
    assert len(graded) == one["counts"]["turns_graded"]
    ids = [g["conversation_id"] for g in graded]
    assert ids[:3] == ["c1", "c1", "c2"]  # c0 has no assistant turn
    assert len({(g["conversation_id"], g["turn_index"]) for g in graded}) == len(graded)
    curated = [orjson.loads(line) for line in (tmp_path / "many" / "curated.jsonl").read_bytes().splitlines()]
    # the first rows with a tool call (in the continuation, then the completion) came after the head: moved there
    assert [r["lineage"]["conversation_id"] for r in curated[:3]] == ["c13", "c13", "c1"]
    assert curated[1]["completion"][0]["tool_calls"]
    # lineage of a conversation without a source names this input and its sha256
    no_source = [r for r in curated if r["lineage"]["conversation_id"] == "1040"]
    assert no_source and no_source[0]["lineage"]["source_sha256"] == one["input"]["transcripts"]["sha256"]
    assert no_source[0]["lineage"]["line"] == 42  # line 41 of the list, after the inserted blank line


def test_each_worker_loads_the_reward_once(tmp_path):
    logs = varied_log(tmp_path / "in")
    pids = tmp_path / "pids"
    policy = policy_file(tmp_path / "policy.json", pids=str(pids))
    summary = run_improve(logs, "improve_fault", tmp_path / "out", policy=policy, workers=2, chunk_bytes=CHUNK)
    loaded = pids.read_text().split()
    chunks = -(-(logs / "transcripts.jsonl").stat().st_size // CHUNK)
    assert chunks > 8 and summary["counts"]["conversations"] == 90
    assert 1 <= len(loaded) <= 2 and len(set(loaded)) == len(loaded) and str(os.getpid()) not in loaded


def test_a_worker_that_dies_is_retried_and_nothing_is_lost_or_doubled(tmp_path):
    logs = varied_log(tmp_path / "in")
    marker = tmp_path / "died"
    policy = policy_file(tmp_path / "policy.json", die_at="c60", marker=str(marker))
    marker.write_text("reference run: do not die")
    run_improve(logs, "improve_fault", tmp_path / "one", policy=policy)
    marker.unlink()
    run_improve(logs, "improve_fault", tmp_path / "many", policy=policy, workers=2, chunk_bytes=CHUNK)
    assert marker.read_text() != str(os.getpid())  # a worker died, not this process
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many")


def test_a_worker_that_keeps_dying_fails_the_run_and_keeps_the_old_outputs(tmp_path):
    logs = varied_log(tmp_path / "in")
    out = tmp_path / "out"
    run_improve(logs, "improve_toy", out)
    before = outputs(out)
    policy = policy_file(tmp_path / "policy.json", die_at="c60", marker=str(tmp_path / "died"), always=True)
    with pytest.raises(PluginError, match="died again after the pool was restarted.*no outputs were written"):
        run_improve(logs, "improve_fault", out, policy=policy, workers=2, chunk_bytes=CHUNK)
    assert outputs(out) == before
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)  # no temp file left behind


def test_a_failing_chunk_fails_the_run_with_the_one_process_error(tmp_path):
    logs = varied_log(tmp_path / "in")
    path = logs / "transcripts.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[70] = b'{"id": "broken", "messages": []}\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(InputError) as one:
        run_improve(logs, "improve_toy", tmp_path / "one")
    with pytest.raises(InputError) as many:
        run_improve(logs, "improve_toy", tmp_path / "many", workers=2, chunk_bytes=CHUNK)
    assert str(one.value) == str(many.value) and many.value.line == 71 and many.value.field == "messages"
    assert not (tmp_path / "many" / "improve_summary.json").exists()

    lines[70] = orjson.dumps(chat("boom", "hi", "EXPLODE")) + b"\n"  # the reward raises in a worker
    path.write_bytes(b"".join(lines))
    with pytest.raises(PluginError, match="reward:improve_toy failed in grade: RuntimeError: asked to explode"):
        run_improve(logs, "improve_toy", tmp_path / "many", workers=2, chunk_bytes=CHUNK)
    assert not (tmp_path / "many" / "improve_summary.json").exists()


def test_check_means_are_exact_whatever_the_split():
    """The per-check means of the summary sum exactly, so chunks merged in any grouping give the same bits."""
    values = [0.1, 1e16, 0.3, -1e16, 0.7] * 1000 + [1 / 3] * 5000
    whole = Tally()
    for v in values:
        whole.add(0.5, {"x": v})
        whole.fold()
    merged = Tally()
    for start in range(0, len(values), 777):
        part = Tally()
        for v in values[start:start + 777]:
            part.add(0.5, {"x": v})
        merged.merge(part)
    import math

    exact = math.fsum(values) / len(values)
    assert whole.summary()["checks"]["x"]["mean"] == merged.summary()["checks"]["x"]["mean"] == exact
    assert sum(values) / len(values) != exact  # a plain running sum would depend on the order


def test_cli_workers_and_engine_options(tmp_path, capsys):
    from stateset_agents.cli import main

    logs = varied_log(tmp_path / "in")
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output",
                 str(tmp_path / "one"), "--workers", "1"]) == 0
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output",
                 str(tmp_path / "two"), "--workers", "2", "--chunk-bytes", str(CHUNK)]) == 0
    assert outputs(tmp_path / "one") == outputs(tmp_path / "two")
    capsys.readouterr()
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output",
                 str(tmp_path / "x"), "--address", "127.0.0.1:6379"]) == 2
    assert "--address names a Ray cluster: use it with --engine ray" in capsys.readouterr().err.replace("\n", "")
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output",
                 str(tmp_path / "x"), "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output",
                 str(tmp_path / "x"), "--engine", "spark"]) == 2
    assert "unknown grading engine 'spark'" in capsys.readouterr().err


def test_a_chunk_that_needs_the_inputs_sha256_asks_for_it(tmp_path):
    """A conversation without `source` gets the input's sha256 in its lineage: a worker that was not given it
    yet says so (the parent waits for it and sends the chunk again), never writing a row without it."""
    from stateset_agents.pipeline.grading import ChunkFailure, ChunkResult, GradeTask, grade_chunk

    block = orjson.dumps(chat(7, "hi", "GOOD reply")) + b"\n"
    task = GradeTask("improve_toy", {}, "inprocess", 0.7, 0.0, 32, source_path="/logs/t.jsonl", shown="t.jsonl")
    assert grade_chunk(task, block, 3) == ChunkFailure("digest", ())
    result = grade_chunk(dataclass_replace(task, digest="ab" * 32), block, 3)
    assert isinstance(result, ChunkResult) and result.counts["curated"] == 1
    lineage = orjson.loads(result.curated[0])["lineage"]
    assert lineage == {"conversation_id": "7", "source_path": "/logs/t.jsonl", "source_sha256": "ab" * 32,
                       "line": 3, "turn_index": 2}
