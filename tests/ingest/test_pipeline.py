"""`run_ingest`: inputs (file, gz, directory), duplicates, ids, determinism, atomic outputs, the summary."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.pipeline import ingest as ingest_step
from stateset_agents.pipeline.ingest import run_ingest

from .logs import openai_calls, read_outputs, write_jsonl
from .test_openai import tool_conversation

OUTPUTS = ("transcripts.jsonl", "rejects.jsonl", "ingest_summary.json")


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def conversation(n: int) -> dict:
    return {"id": f"c{n}", "messages": [{"role": "user", "content": f"question {n}"},
                                        {"role": "assistant", "content": f"answer {n}"}]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_gz_input_records_the_sha256_of_the_compressed_file(here):
    log = write_jsonl(Path("logs/day1.jsonl.gz"), [conversation(1), "{broken", conversation(2)], gz=True)
    summary = run_ingest("openai", "logs/day1.jsonl.gz", "out")
    transcripts, rejects, _ = read_outputs(Path("out"))
    assert [t["source"] for t in transcripts] == [
        {"path": "logs/day1.jsonl.gz", "sha256": sha256(log), "line": n} for n in (1, 3)]
    assert rejects[0]["line"] == 2 and rejects[0]["path"] == "logs/day1.jsonl.gz"
    assert summary["inputs"][0]["sha256"] == sha256(log)


def test_a_directory_is_read_in_name_order_with_relative_paths(here):
    write_jsonl(Path("logs/b.jsonl"), [conversation(2)])
    write_jsonl(Path("logs/a.jsonl.gz"), [conversation(1)], gz=True)
    write_jsonl(Path("logs/c.jsonl"), [conversation(3), "", conversation(4)])  # a blank line is skipped
    write_jsonl(Path("logs/notes.txt"), ["not a log"])
    summary = run_ingest("openai", "logs", "out")
    transcripts, _, _ = read_outputs(Path("out"))
    assert [(t["id"], t["source"]["path"], t["source"]["line"]) for t in transcripts] == [
        ("c1", os.path.join("logs", "a.jsonl.gz"), 1), ("c2", os.path.join("logs", "b.jsonl"), 1),
        ("c3", os.path.join("logs", "c.jsonl"), 1), ("c4", os.path.join("logs", "c.jsonl"), 3)]
    assert [f["path"] for f in summary["inputs"]] == [os.path.join("logs", n) for n in ("a.jsonl.gz", "b.jsonl",
                                                                                       "c.jsonl")]
    assert [f["written"] for f in summary["inputs"]] == [1, 1, 2]


@pytest.mark.parametrize("inputs, message", [("missing.jsonl", "no such file"), ("empty", "no .jsonl")])
def test_missing_inputs_are_an_input_error(here, inputs, message):
    Path("empty").mkdir()
    with pytest.raises(InputError, match=message):
        run_ingest("openai", inputs, "out")


def test_the_output_directory_may_not_be_the_input_directory(here):
    write_jsonl(Path("logs/a.jsonl"), [conversation(1)])
    with pytest.raises(InputError, match="must not be the input directory"):
        run_ingest("openai", "logs", "logs")


def test_rerunning_gives_byte_identical_outputs(here):
    lines = [conversation(1), "{oops", tool_conversation("Paris"), conversation(1), {"messages": []}]
    write_jsonl(Path("log.jsonl"), lines)
    run_ingest("openai", "log.jsonl", "first", redact=True)
    run_ingest("openai", "log.jsonl", "second", redact=True)
    for name in OUTPUTS:
        assert (Path("first") / name).read_bytes() == (Path("second") / name).read_bytes(), name


def test_exact_duplicates_are_dropped_and_counted_and_ids_stay_unique(here):
    clash = {**conversation(9), "id": "c1"}  # same id, different conversation
    same_content_other_id = {**conversation(1), "id": "copy-of-c1"}
    write_jsonl(Path("log.jsonl"), [conversation(1), conversation(2), conversation(1), same_content_other_id, clash])
    summary = run_ingest("openai", "log.jsonl", "out")
    transcripts, rejects, _ = read_outputs(Path("out"))
    assert [t["id"] for t in transcripts] == ["c1", "c2"]
    assert summary["duplicates"] == 2
    assert [(r["line"], r["reason"], r["field"]) for r in rejects] == [(5, "duplicate_id", "id")]
    assert (summary["read"], summary["conversations"], summary["written"], summary["rejected"]) == (5, 5, 2, 1)


def test_every_line_is_accounted_for(here):
    lines = [conversation(1), "[1, 2", conversation(1), tool_conversation(), {"messages": [{"role": "bot"}]}, ""]
    write_jsonl(Path("log.jsonl"), lines)
    summary = run_ingest("openai", "log.jsonl", "out")
    assert summary["read"] == 5  # the blank line is not a record
    assert summary["read"] == summary["written"] + summary["duplicates"] + summary["rejected"]


def test_the_summary_describes_the_outputs_it_sits_beside(here):
    write_jsonl(Path("log.jsonl"), [conversation(1), "nope"])
    summary = run_ingest("openai", "log.jsonl", "out")
    for key, name in (("transcripts", "transcripts.jsonl"), ("rejects", "rejects.jsonl")):
        described = summary["outputs"][key]
        assert described["file"] == name and described["sha256"] == sha256(Path("out") / name)
        assert described["rows"] == 1
    assert summary["ingestor"]["name"] == "ingestor:openai" and summary["redactions"] is None


def test_a_failed_run_leaves_the_previous_outputs_whole(here, monkeypatch):
    write_jsonl(Path("log.jsonl"), [conversation(n) for n in range(50)])
    run_ingest("openai", "log.jsonl", "out")
    before = {name: (Path("out") / name).read_bytes() for name in OUTPUTS}

    real_load = ingest_step.load_component

    class Crashing:
        """Wraps the real ingestor and dies half way through the file."""

        def __init__(self, inner):
            self.inner = inner

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.inner.close()

        def ingest(self, source):
            for n, item in enumerate(self.inner.ingest(source)):
                if n == 25:
                    raise KeyboardInterrupt
                yield item

    monkeypatch.setattr(ingest_step, "load_component", lambda *a, **k: Crashing(real_load(*a, **k)))
    write_jsonl(Path("log.jsonl"), [conversation(n) for n in range(100, 150)])
    with pytest.raises(KeyboardInterrupt):
        run_ingest("openai", "log.jsonl", "out")
    assert {name: (Path("out") / name).read_bytes() for name in OUTPUTS} == before
    assert sorted(os.listdir("out")) == sorted(OUTPUTS)  # no temp files left behind


def test_out_of_process_ingestor_gives_byte_identical_outputs(here):
    """The pipeline uses only the Ingestor interface: a plugin served over gRPC writes the same bytes."""
    lines = [conversation(1), *openai_calls(tool_conversation("Paris"), conversation_id="s1"), "{bad",
             {"messages": [{"role": "user", "content": "mail a@b.io"}]}, conversation(1)]
    write_jsonl(Path("log.jsonl"), lines)
    for runtime in ("inprocess", "subprocess"):
        run_ingest("openai", "log.jsonl", runtime, runtime=runtime, redact=True)
    for name in OUTPUTS:
        assert (Path("inprocess") / name).read_bytes() == (Path("subprocess") / name).read_bytes(), name
