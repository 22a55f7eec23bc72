"""`improve run --workers N`: grading on N local processes (this one and N - 1 spawned workers) gives the
one-process run's bytes, in order; each process loads the reward once; a worker that dies is retried once, then the
run fails closed; an error fails the run in input order, wherever its chunk was graded.

A worker of `improve_fault` with `hold` waits until this process has graded a conversation, so that this process
surely grades a chunk, and chunk 0 always goes to a worker (the first chunks out are sent before this process grades
any): the tests that need one or the other do not depend on timing."""
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


def test_each_process_loads_the_reward_once(tmp_path):
    logs = varied_log(tmp_path / "in")
    pids = tmp_path / "pids"
    policy = policy_file(tmp_path / "policy.json", pids=str(pids), parent=os.getpid(), hold=str(tmp_path / "hold"))
    summary = run_improve(logs, "improve_fault", tmp_path / "out", policy=policy, workers=3, chunk_bytes=CHUNK)
    loaded = pids.read_text().split()
    chunks = -(-(logs / "transcripts.jsonl").stat().st_size // CHUNK)
    assert chunks > 8 and summary["counts"]["conversations"] == 90
    # this process and the two workers it spawned (three grading processes), once each
    assert len(loaded) == len(set(loaded)) == 3 and str(os.getpid()) in loaded


def test_this_process_grades_chunks_too_and_the_bytes_stay_the_same(tmp_path):
    logs = varied_log(tmp_path / "in")
    graded_by = tmp_path / "graded_by"
    policy = policy_file(tmp_path / "policy.json", parent=os.getpid(), hold=str(tmp_path / "hold"),
                         graded_by=str(graded_by))
    one = run_improve(logs, "improve_fault", tmp_path / "one", policy=policy, held_out_fraction=0.2)
    graded_by.unlink()
    many = run_improve(logs, "improve_fault", tmp_path / "many", policy=policy, held_out_fraction=0.2, workers=2,
                       chunk_bytes=CHUNK)
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many") and one["counts"] == many["counts"]
    who = [line.split() for line in graded_by.read_text().splitlines()]
    here = {cid for pid, cid in who if pid == str(os.getpid())}
    elsewhere = {cid for pid, cid in who if pid != str(os.getpid())}
    assert here and elsewhere and not here & elsewhere  # both graded, no chunk twice
    assert "c1" in elsewhere  # chunk 0 went to the worker
    assert len(who) == len(here | elsewhere) == 90 - 6  # every conversation with an assistant turn, once


def test_a_worker_that_dies_is_retried_and_nothing_is_lost_or_doubled(tmp_path):
    logs = varied_log(tmp_path / "in")
    marker, graded_by = tmp_path / "died", tmp_path / "graded_by"
    # c1 is in chunk 0, which a worker grades; it waits until this process has graded a chunk, then dies
    policy = policy_file(tmp_path / "policy.json", die_at="c1", marker=str(marker), parent=os.getpid(),
                         hold=str(tmp_path / "hold"), graded_by=str(graded_by))
    run_improve(logs, "improve_fault", tmp_path / "one", policy=policy)
    graded_by.unlink()
    run_improve(logs, "improve_fault", tmp_path / "many", policy=policy, workers=2, chunk_bytes=CHUNK)
    assert marker.read_text() not in ("", str(os.getpid()))  # a worker died, not this process
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many")
    who = [line.split() for line in graded_by.read_text().splitlines()]
    here = [cid for pid, cid in who if pid == str(os.getpid())]
    # the chunks this process graded were kept, not graded again on the new pool
    assert here and all(sum(1 for _, cid in who if cid == mine) == 1 for mine in here)


def test_a_worker_that_keeps_dying_fails_the_run_and_keeps_the_old_outputs(tmp_path):
    logs = varied_log(tmp_path / "in")
    out = tmp_path / "out"
    run_improve(logs, "improve_toy", out)
    before = outputs(out)
    policy = policy_file(tmp_path / "policy.json", die_at="c1", marker=str(tmp_path / "died"), always=True,
                         parent=os.getpid())
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


def test_an_error_in_a_chunk_this_process_graded_fails_the_run_in_input_order(tmp_path):
    logs = varied_log(tmp_path / "in")
    path = logs / "transcripts.jsonl"
    policy = policy_file(tmp_path / "policy.json", parent=os.getpid(), hold=str(tmp_path / "hold"),
                         explode_in_parent=True)
    # every chunk graded here fails; chunks 0 and 1 went to the worker before, and succeed
    with pytest.raises(PluginError, match="reward:improve_fault failed in grade: RuntimeError: asked to explode in "
                                          "the parent"):
        run_improve(logs, "improve_fault", tmp_path / "many", policy=policy, workers=2, chunk_bytes=CHUNK)
    assert not (tmp_path / "many" / "improve_summary.json").exists()

    # a bad line in chunk 1 (a worker's) comes before any chunk graded here: its error is the run's, as in one
    # process, although this process's chunk failed first
    lines = path.read_bytes().splitlines(keepends=True)
    assert sum(map(len, lines[:5])) > CHUNK >= sum(map(len, lines[4:6]))  # chunk 0 ends before line 5; 6 is in 1
    lines[5] = b'{"id": "broken", "messages": "none"}\n'
    path.write_bytes(b"".join(lines))
    with pytest.raises(InputError) as one:
        run_improve(logs, "improve_toy", tmp_path / "one")
    with pytest.raises(InputError) as many:
        run_improve(logs, "improve_fault", tmp_path / "many", policy=policy, workers=2, chunk_bytes=CHUNK)
    assert str(one.value) == str(many.value) and many.value.line == 6 and many.value.field == "messages"
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


def test_a_gzipped_log_gives_the_same_bytes(tmp_path):
    """A gzipped input's chunks cannot be read at file offsets: they travel with their bytes (through the spool)."""
    import gzip

    logs = varied_log(tmp_path / "in")
    packed = tmp_path / "transcripts.jsonl.gz"
    packed.write_bytes(gzip.compress((logs / "transcripts.jsonl").read_bytes()))
    one = run_improve(packed, "improve_toy", tmp_path / "one")
    many = run_improve(packed, "improve_toy", tmp_path / "many", workers=2, chunk_bytes=CHUNK)
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many") and one["counts"] == many["counts"]


def test_chunks_are_whole_lines_numbered_as_in_the_file(tmp_path):
    from stateset_agents.pipeline.grading_pool import Chunk, InputChanged, read_chunks

    lines = [b"a" * 5 + b"\n", b"\n", b"b" * 30 + b"\n", b"c\n", b"d" * 3]  # a blank line; a long one; no last newline
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    with open(path, "rb") as f:
        chunks = list(read_chunks(f, 8, keep=False))
        # at most 8 bytes cut after a newline, or one longer line whole; the last line has no newline
        assert [(c.offset, c.size, c.first_line, c.block) for c in chunks] == [
            (0, 7, 1, None), (7, 31, 3, None), (38, 2, 4, None), (40, 3, 5, None)]
        assert b"".join(c.read(f.fileno()) for c in chunks) == path.read_bytes()
        f.seek(0)
        assert [c.block for c in read_chunks(f, 8, keep=True)] == [b"".join(lines[:2]), *lines[2:]]
        path.write_bytes(lines[0])  # cut short after the chunks were counted: a worker's read fails the chunk
        with pytest.raises(InputChanged, match="the input changed while it was graded"):
            Chunk(7, 31, 3).read(f.fileno())


def test_this_process_grades_while_the_oldest_chunk_is_out_within_its_budget():
    """The scheduling alone, with a stand-in engine whose chunks are never back before they are asked for: this
    process grades the next chunks meanwhile, stops while 25 bytes of its rows wait, and all merge in order."""
    from concurrent.futures import Future

    from stateset_agents.pipeline.grading import ChunkResult, GradeTask
    from stateset_agents.pipeline.grading_engines import graded_chunks
    from stateset_agents.pipeline.grading_pool import Chunk

    events = []

    def rows(chunk, where):
        events.append((where, chunk.first_line))
        return ChunkResult({}, {}, Tally(), (str(chunk.first_line).encode() * 10, 1), (b"", 0), [], {})

    class Engine:
        workers = 1

        def submit(self, task, chunk):
            events.append(("sent", chunk.first_line))
            return chunk

        def done(self, handle):
            return False

        def result(self, handle):
            return rows(handle, "worker")

    class Here:
        def grade(self, task, chunk):
            return rows(chunk, "here")

    task = GradeTask("improve_toy", {}, "inprocess", 0.7, 0.0, 32, source_path="/t.jsonl", shown="t.jsonl")
    digest: Future = Future()
    graded_here, waiting, most = set(), 0, 0
    for result in graded_chunks(Engine(), task, (Chunk(i, 1, i) for i in range(10)), digest, 2, Here(), ahead=25):
        number = int(result.graded[0][:1])
        events.append(("merged", number))
    for where, number in events:
        if where == "here":
            graded_here.add(number)
            waiting += 1
        elif where == "merged" and number in graded_here:
            waiting -= 1
        most = max(most, waiting)
    assert [n for where, n in events if where == "merged"] == list(range(10))
    assert events[:6] == [("sent", 0), ("sent", 1), ("here", 2), ("here", 3), ("here", 4), ("worker", 0)]
    assert graded_here and most == 3  # 10 + 10 bytes wait: one more is graded; 30 >= 25: none until they merge


def test_no_more_processes_than_the_log_has_chunks(tmp_path, monkeypatch):
    """A log of two chunks asked for 8 workers grades on 2 processes (this one and 1 spawned), not 8."""
    from stateset_agents.pipeline import grading_engines

    sizes = []

    class Recording(grading_engines.LocalPool):
        def __init__(self, workers, fd):
            sizes.append(workers)
            super().__init__(workers, fd)

    monkeypatch.setattr(grading_engines, "LocalPool", Recording)
    logs = varied_log(tmp_path / "in")
    chunk = (logs / "transcripts.jsonl").stat().st_size // 2 + 1  # two chunks
    one = run_improve(logs, "improve_toy", tmp_path / "one", held_out_fraction=0.2)
    many = run_improve(logs, "improve_toy", tmp_path / "many", held_out_fraction=0.2, workers=8, chunk_bytes=chunk)
    assert sizes == [1]  # spawned workers: the parent grades too
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many") and one["counts"] == many["counts"]
