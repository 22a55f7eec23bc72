"""SIGKILL during `ingest` and `improve run`, over the outputs of an earlier run into the same folder: every
output is the earlier run's bytes or the new run's (the summary, renamed last, is new only when all are), and the
rerun writes the same bytes as an uninterrupted run, leaving no temp file."""
from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from stateset_agents.core.jsonio import sha256_file
from stateset_agents.samples import LOGS

from .crashkit import Kill, assert_old_or_new, kill_at, run, snapshot, temp_appears, temps, timed


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[Path, Path]:
    """Two logs, so that two runs write different bytes: half the samples, and all of them, each with a bad
    line (rejects.jsonl is not empty)."""
    root = tmp_path_factory.mktemp("logs")
    lines = LOGS.read_bytes().splitlines(keepends=True)
    (root / "a").mkdir()
    (root / "b").mkdir()
    (root / "a" / "log.jsonl").write_bytes(b"".join(lines[:48]) + b"{bad\n")
    (root / "b" / "log.jsonl").write_bytes(b"{not json\n" + b"".join(lines))
    return root / "a" / "log.jsonl", root / "b" / "log.jsonl"


def alternate_kills(cwd: Path, state: Path, out: Path, commands: dict[str, list[str]], points, summary: str):
    """Reference runs of both commands, then each kill point in turn, alternating which command is killed over
    the other's outputs; after each kill the check, then the rerun and its bytes."""
    durations = {}
    refs = {}
    for name in ("a", "b"):  # b last: the folder holds b's outputs when the first kill (of a) starts
        durations[name] = timed(commands[name], cwd, state)
        refs[name] = snapshot(out)
        assert not temps(out)
    assert refs["a"] != refs["b"]
    rng = random.Random(24)
    fired = []
    for index, make_point in enumerate(points):
        target, other = ("a", "b") if index % 2 == 0 else ("b", "a")
        point: Kill = make_point(rng, durations[target])
        if kill_at(commands[target], cwd, state, point):
            fired.append(point.name)
        now = assert_old_or_new(out, refs[other], refs[target], f"{point.name} ({target} over {other})")
        if now.get(summary) == refs[target][summary]:  # the summary is renamed last: new only when all are
            assert now == refs[target], f"{point.name}: a new summary beside old outputs"
        run(commands[target], cwd, state)
        assert snapshot(out) == refs[target], f"{point.name}: the rerun's bytes differ from an uninterrupted run"
        assert not temps(out), f"{point.name}: temp files left after the rerun: {temps(out)}"
    assert len(fired) >= len(points) - 1, f"the kill points fired too rarely to test anything: {fired}"


def delay(fraction_low: float, fraction_high: float):
    return lambda rng, duration: Kill(f"after {fraction_low}-{fraction_high} of the run",
                                      after=rng.uniform(fraction_low, fraction_high) * duration)


def test_sigkill_during_ingest_leaves_old_or_new_outputs_and_the_rerun_matches(logs, tmp_path, state_dir):
    out = tmp_path / "ingested"
    commands = {k: ["ingest", "--format", "openai", "--input", log, "--output", out] for k, log in zip("ab", logs)}
    points = [
        lambda rng, d: Kill("as transcripts.jsonl's temp file appears", when=temp_appears(out, "transcripts.jsonl")),
        lambda rng, d: Kill("transcripts and rejects renamed, not the summary",
                            before_rename="ingest_summary.json"),
        delay(0.5, 1.0),
    ]
    alternate_kills(tmp_path, state_dir, out, commands, points, "ingest_summary.json")
    summary = orjson.loads((out / "ingest_summary.json").read_bytes())
    for described in summary["outputs"].values():  # the summary's record of every output holds
        assert sha256_file(out / described["file"]) == described["sha256"], described["file"]


@pytest.fixture(scope="module")
def transcripts(logs, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ingested")
    state = root / "state"
    for name, log in zip("ab", logs):
        run(["ingest", "--format", "openai", "--input", log, "--output", root / name], root, state)
    return root / "a", root / "b"


def test_sigkill_during_improve_run_leaves_old_or_new_outputs_and_the_rerun_matches(transcripts, tmp_path,
                                                                                     state_dir):
    out = tmp_path / "improved"
    commands = {k: ["improve", "run", "--transcripts", t, "--reward", "customer_support", "--output", out]
                for k, t in zip("ab", transcripts)}
    points = [
        lambda rng, d: Kill("as curated.jsonl's temp file appears", when=temp_appears(out, "curated.jsonl")),
        lambda rng, d: Kill("graded.jsonl renamed, not the splits", before_rename="test.jsonl"),
        lambda rng, d: Kill("all renamed but the summary", before_rename="improve_summary.json"),
    ]
    alternate_kills(tmp_path, state_dir, out, commands, points, "improve_summary.json")
    summary = orjson.loads((out / "improve_summary.json").read_bytes())
    for name, described in summary["outputs"].items():  # the summary's record of every output holds
        assert sha256_file(out / name) == described["sha256"], name
