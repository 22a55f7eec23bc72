"""benchmarks/bench_reward_cost.py's instruction count: the work of K conversations is the 2K-conversation run minus
the K-conversation run, on each side (start-up cancels), and a machine without valgrind is told what to install."""
from __future__ import annotations

import json
import os
import sys

import pytest

from tests.helpers.benchmarks import load_benchmark

# Stands in for valgrind: counts 1,000 instructions of start-up plus a per-conversation cost that differs between
# the baseline tree (its sources on PYTHONPATH) and this one, and reports them as callgrind does, on stderr.
FAKE_VALGRIND = """#!{python}
import json, os, sys
args = json.loads(sys.argv[-1])
with open(os.path.join(args["input"], "transcripts.jsonl")) as f:
    conversations = sum(1 for _ in f)
per_conversation = 100 if "basetree" in os.environ.get("PYTHONPATH", "") else 150
sys.stderr.write("==1== Collected : %d\\n" % (1000 + per_conversation * conversations))
"""


@pytest.fixture
def bench(monkeypatch):
    # It imports its sibling by name (run as a script, its folder is first on the import path): the sibling is
    # loaded by its file path and handed over under that name instead.
    monkeypatch.setitem(sys.modules, "bench_ingest_improve", load_benchmark("bench_ingest_improve"))
    return load_benchmark("bench_reward_cost")


def _ingest(tmp_path, n):
    folder = tmp_path / "ingest"
    folder.mkdir()
    (folder / "transcripts.jsonl").write_text("".join(json.dumps({"id": f"c{i}"}) + "\n" for i in range(n)))
    (folder / "ingest_summary.json").write_text(json.dumps({"accepted": n}))
    return folder


def test_first_conversations_are_the_first_k_lines_with_the_summary(bench, tmp_path):
    folder = bench.first_conversations(_ingest(tmp_path, 10), 4, tmp_path / "first_4")
    lines = (folder / "transcripts.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["c0", "c1", "c2", "c3"]
    assert json.loads((folder / "ingest_summary.json").read_text()) == {"accepted": 10}


def test_instructions_of_k_conversations_cancel_start_up(bench, tmp_path, monkeypatch):
    tools = tmp_path / "bin"
    tools.mkdir()
    valgrind = tools / "valgrind"
    valgrind.write_text(FAKE_VALGRIND.format(python=sys.executable))
    valgrind.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    rows = bench.instruction_rows(tmp_path / "basetree", _ingest(tmp_path, 10), ["gsm8k"], 3, tmp_path / "work")
    (row,) = rows
    assert row["baseline"] == {"first_k": 1300, "first_2k": 1600, "k_conversations": 300}
    assert row["current"] == {"first_k": 1450, "first_2k": 1900, "k_conversations": 450}
    assert row["ratio"] == pytest.approx(1.5)


def test_without_valgrind_it_says_what_to_install(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="apt-get install -y valgrind"):
        bench.instruction_rows(tmp_path / "basetree", _ingest(tmp_path, 4), ["gsm8k"], 1, tmp_path / "work")
