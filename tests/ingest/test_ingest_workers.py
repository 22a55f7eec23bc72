"""`ingest --workers N`: a log parsed on N local processes (this one and N - 1 spawned workers) gives the
one-process run's transcripts, rejects and summary byte for byte; chunks really go to the workers; a file of call
logs is ingested in one pass from its first call on; an ingestor that cannot split a file runs on one process; a
worker that dies, or an ingestor that raises, fails the run and leaves the previous outputs in place.

Small chunks (`CHUNK` bytes) make a small log many chunks. The first chunks of a run always go to the workers
(they are sent before this process parses any), so "a worker parsed something" does not depend on timing."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stateset_agents.core.errors import InputError, PluginError
from stateset_agents.pipeline import ingest_parallel
from stateset_agents.pipeline.ingest import run_ingest
from tests.helpers.realdata import tau_log_records

from .logs import interleave, openai_calls, write_jsonl
from .test_openai import tool_conversation

OUTPUTS = ("transcripts.jsonl", "rejects.jsonl", "ingest_summary.json")
CHUNK = 2000  # bytes: a few lines a chunk


@pytest.fixture(autouse=True)
def probe_ingestor(monkeypatch):
    """`ingest_probe` (worker_ingestors.py) registered here and, through the environment, in every worker."""
    from stateset_agents.core.registry import PLUGIN_MODULES_ENV, get_registry

    monkeypatch.setenv(PLUGIN_MODULES_ENV, os.environ[PLUGIN_MODULES_ENV] + ",tests.ingest.worker_ingestors")
    get_registry(refresh=True)
    yield
    monkeypatch.undo()
    get_registry(refresh=True)


def outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in OUTPUTS}


def same_as_one_process(inputs: Path, tmp_path: Path, format: str = "openai", **kwargs) -> dict:
    """Ingest `inputs` on one process and on two; assert the same bytes; the two-process summary."""
    one = run_ingest(format, inputs, tmp_path / "one", **kwargs)
    many = run_ingest(format, inputs, tmp_path / "many", workers=2, chunk_bytes=CHUNK, **kwargs)
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many")
    assert one == many
    return many


def chat(n: int, id: str | None = None, words: str = "") -> dict:
    conv = {"messages": [{"role": "user", "content": f"question {n} {words}"},
                         {"role": "assistant", "content": f"answer {n}"}]}
    if id is not None:
        conv["id"] = id
    return conv


def messy_lines(n: int = 120) -> list:
    """Conversations with every kind of reject, exact duplicates and reused ids, spread over many chunks: so a
    duplicate's first copy, or an id's first use, is in an earlier chunk than the duplicate."""
    lines: list = []
    for i in range(n):
        lines.append(chat(i, id=f"c{i}", words=f"mail me at user{i}@example.com or call +1 415 555 01{i % 90:02d}"))
        if i % 7 == 3:
            lines.append("{not json")
        if i % 11 == 5:
            lines.append({"messages": [{"role": "wizard", "content": "?"}]})  # a reject of the ingestor's
        if i % 13 == 6:
            lines.append({"messages": []})
        if i % 9 == 8:
            lines.append(chat(i - 8, id=f"c{i - 8}", words=f"mail me at user{i - 8}@example.com or call "
                                                         f"+1 415 555 01{(i - 8) % 90:02d}"))  # an exact duplicate
        if i % 10 == 9:
            lines.append(chat(1000 + i, id=f"c{i - 9}"))  # a different conversation reusing an earlier id
        if i % 17 == 0:
            lines.append({"messages": tool_conversation(f"City{i}")})  # no id: one from its content
        if i % 23 == 0:
            lines.append("")  # a blank line: line numbers still count it
    lines.append("[" * 300 + "]" * 300)  # nested too deep to write
    return lines


def test_messy_log_gives_the_one_process_bytes(tmp_path):
    log = write_jsonl(tmp_path / "in" / "log.jsonl", messy_lines())
    assert log.stat().st_size > 10 * CHUNK
    summary = same_as_one_process(log, tmp_path / "plain")
    reasons = summary["rejected_by_reason"]
    assert summary["duplicates"] >= 10 and reasons["duplicate_id"] >= 10 and reasons["invalid_json"] >= 10
    assert {"unknown_role", "no_messages", "too_deep"} <= set(reasons)
    redacted = same_as_one_process(log, tmp_path / "redacted", redact=True)
    assert redacted["redactions"]["EMAIL"] > 100


def test_chunks_go_to_the_workers_and_each_is_parsed_once(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", messy_lines())
    parsed_by = tmp_path / "parsed_by"
    config = {"policy": {"parsed_by": str(parsed_by)}}
    run_ingest("ingest_probe", log, tmp_path / "one", config=config)
    assert not parsed_by.exists()  # one process: the file in one pass, never in parts
    run_ingest("ingest_probe", log, tmp_path / "many", config=config, workers=3, chunk_bytes=CHUNK)
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many")
    who = [line.split() for line in parsed_by.read_text().splitlines()]
    firsts = [int(first) for _, first in who]
    assert len(firsts) == len(set(firsts)) > 10  # every chunk once
    workers = {pid for pid, _ in who if pid != str(os.getpid())}
    assert len(workers) >= 1  # the first chunks went to spawned workers
    assert 1 in {int(first) for pid, first in who if pid in workers}


def test_real_logs_and_their_call_logs(tmp_path):
    records = tau_log_records(with_expected_calls=True)
    conversations = write_jsonl(tmp_path / "tau.jsonl", records + records[:10])  # the last 10: duplicates
    summary = same_as_one_process(conversations, tmp_path / "conversations")
    assert summary["written"] == 100 and summary["duplicates"] == 10
    # Real trajectories as call logs of concurrent conversations: each stitched across many lines and chunks.
    calls = interleave(*[openai_calls(r["messages"], tools=r.get("tools"), conversation_id=r["id"])
                         for r in records[:20]])
    call_log = write_jsonl(tmp_path / "calls.jsonl", calls)
    summary = same_as_one_process(call_log, tmp_path / "calls")
    assert summary["call_logs"]["conversations"] == 20 and summary["call_logs"]["calls"] == len(calls)


def test_call_logs_stitched_across_a_chunk_boundary_fall_back_to_one_pass(tmp_path):
    """Plain conversations (parsed in chunks), then call logs whose conversations span chunks, then plain ones
    again: the file is ingested in one pass from the chunk of its first call on, and the bytes do not change."""
    head = [chat(i, id=f"h{i}") for i in range(40)]
    calls = interleave(*[openai_calls(tool_conversation(f"Town{k}")) for k in range(6)])
    tail = [chat(100 + i, id=f"t{i}") for i in range(40)] + [chat(3, id="h3")]  # a duplicate of the head's
    log = write_jsonl(tmp_path / "log.jsonl", head + calls + tail)
    parsed_by = tmp_path / "parsed_by"
    config = {"policy": {"parsed_by": str(parsed_by)}}
    one = run_ingest("ingest_probe", log, tmp_path / "one", config=config)
    many = run_ingest("ingest_probe", log, tmp_path / "many", config=config, workers=2, chunk_bytes=CHUNK)
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many")
    assert many["call_logs"] == {"calls": len(calls), "conversations": 6, "unstitched": 0}
    assert many["duplicates"] == 1
    stitched = [json.loads(line) for line in (tmp_path / "many" / "transcripts.jsonl").read_text().splitlines()
                if "lines" in json.loads(line)["source"]]
    assert len(stitched) == 6 and all(len(s["source"]["lines"]) == 3 for s in stitched)
    assert min(int(first) for first in parsed_by.read_text().split()[1::2]) == 1  # the head went in chunks


def test_a_directory_of_files_with_a_gzipped_one_and_an_empty_one(tmp_path):
    lines = messy_lines(60)
    write_jsonl(tmp_path / "in" / "a.jsonl", lines[:60])
    write_jsonl(tmp_path / "in" / "b.jsonl.gz", lines[60:] + lines[:5], gz=True)  # duplicates across files
    write_jsonl(tmp_path / "in" / "c.jsonl", [])
    write_jsonl(tmp_path / "in" / "d.jsonl", openai_calls(tool_conversation("Oslo")) + lines[:3])
    summary = same_as_one_process(tmp_path / "in", tmp_path / "out")
    assert [Path(f["path"]).name for f in summary["inputs"]] == ["a.jsonl", "b.jsonl.gz", "c.jsonl", "d.jsonl"]
    assert summary["inputs"][2]["read"] == 0 and summary["inputs"][1]["duplicates"] >= 5


def test_a_gzipped_input_is_parsed_in_chunks_too(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl.gz", messy_lines() + openai_calls(tool_conversation("Rome")), gz=True)
    assert same_as_one_process(log, tmp_path / "out")["call_logs"]["conversations"] == 1
    parsed_by = tmp_path / "parsed_by"
    run_ingest("ingest_probe", log, tmp_path / "probe", config={"policy": {"parsed_by": str(parsed_by)}},
               workers=2, chunk_bytes=CHUNK)
    assert any(pid != str(os.getpid()) for pid in parsed_by.read_text().split()[::2])


def test_an_ingestor_that_cannot_split_a_file_runs_on_one_process(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a non-splittable ingestor was run on workers")

    monkeypatch.setattr(ingest_parallel, "ingest_on_workers", never)
    log = write_jsonl(tmp_path / "log.jsonl", [{"user": f"hi {i}", "assistant": "hello"} for i in range(300)]
                      + ["{bad"])
    summary = same_as_one_process(log, tmp_path / "out", format="test_lines")
    assert summary["written"] == 300


def test_a_worker_that_dies_fails_the_run_and_keeps_the_previous_outputs(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", messy_lines())
    run_ingest("openai", log, tmp_path / "out")
    before = outputs(tmp_path / "out")
    config = {"policy": {"die_in_worker": True, "parent": os.getpid()}}
    with pytest.raises(PluginError, match=r"ingest worker \d+ ended \(exit code 3\) without answering"):
        run_ingest("ingest_probe", log, tmp_path / "out", config=config, workers=2, chunk_bytes=CHUNK)
    assert outputs(tmp_path / "out") == before
    assert not [p for p in (tmp_path / "out").iterdir() if p.name not in OUTPUTS]  # no temp file left


@pytest.mark.parametrize("explode_at", [1, 150])
def test_an_ingestor_error_fails_the_run_wherever_its_chunk_was_parsed(tmp_path, explode_at):
    log = write_jsonl(tmp_path / "log.jsonl", messy_lines())
    run_ingest("openai", log, tmp_path / "out")
    before = outputs(tmp_path / "out")
    config = {"policy": {"explode_at": explode_at}}
    with pytest.raises(RuntimeError, match=f"asked to explode at line {explode_at}"):
        run_ingest("ingest_probe", log, tmp_path / "out", config=config)
    with pytest.raises(PluginError, match=f"RuntimeError: asked to explode at line {explode_at}"):
        run_ingest("ingest_probe", log, tmp_path / "out", config=config, workers=2, chunk_bytes=CHUNK)
    assert outputs(tmp_path / "out") == before


def test_progress_reports_every_file_start_and_end(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", messy_lines(40))
    write_jsonl(tmp_path / "in" / "b.jsonl", messy_lines(40)[::-1])
    seen: list[dict] = []
    run_ingest("openai", tmp_path / "in", tmp_path / "out", workers=2, chunk_bytes=CHUNK, progress=seen.append)
    ends = [u for u in seen if u["line"] is None]
    assert [(u["file_index"], u["files"]) for u in ends] == [(1, 2), (2, 2)]
    summary = json.loads((tmp_path / "out" / "ingest_summary.json").read_text())
    assert [u["written"] for u in ends] == [f["written"] for f in summary["inputs"]]


def test_cli_workers_option(tmp_path, monkeypatch):
    import stateset_agents.cli.ingest_cmd  # noqa: F401  (attaches the command)
    from stateset_agents.cli.app import app

    monkeypatch.chdir(tmp_path)
    write_jsonl(Path("log.jsonl"), messy_lines(60))
    for workers, out in (("1", "one"), ("2", "many")):
        result = CliRunner().invoke(app, ["ingest", "-f", "openai", "-i", "log.jsonl", "-o", out,
                                          "--workers", workers, "--chunk-bytes", str(CHUNK)])
        assert result.exit_code == 0, result.output
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many")
    result = CliRunner().invoke(app, ["ingest", "-f", "openai", "-i", "log.jsonl", "-o", "x", "--workers", "0"])
    assert isinstance(result.exception, InputError) and "--workers must be at least 1" in str(result.exception)


def test_no_more_processes_than_the_log_has_chunks(tmp_path, monkeypatch):
    """A log of two chunks asked for 8 workers starts 2 processes (this one and 1 spawned), not 8."""
    started = []
    real = ingest_parallel.start_pool

    def recording(workers):
        started.append(workers)
        return real(workers)

    monkeypatch.setattr(ingest_parallel, "start_pool", recording)
    log = write_jsonl(tmp_path / "log.jsonl", [chat(i, id=f"c{i}") for i in range(60)])
    size = log.stat().st_size
    chunk = size // 2 + 1  # two chunks
    one = run_ingest("openai", log, tmp_path / "one")
    many = run_ingest("openai", log, tmp_path / "many", workers=8, chunk_bytes=chunk)
    assert started == [2]
    assert outputs(tmp_path / "one") == outputs(tmp_path / "many") and one == many
