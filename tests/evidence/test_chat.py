"""`chat` driven through stdin, and the `evaluator:chat` component it runs on (cached model, any runtime)."""
from __future__ import annotations

import io
import json

from stateset_agents.cli import main
from stateset_agents.core.runtimes import load_component

SMALL = {"max_new_tokens": 4, "temperature": 0.0}


def test_chat_reads_stdin_grades_replies_resets_and_saves(trained_runs, monkeypatch, tmp_path, capsys):
    transcript = tmp_path / "chat.jsonl"
    script = f"hello there\nsay a number\n/save {transcript}\n/reset\ngood morning\n/save {transcript}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(script))
    rc = main(["chat", "--adapter", str(trained_runs[0] / "adapter"), "--reward", "toy_digits",
               "--max-new-tokens", "4", "--temperature", "0"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("assistant> ") == 3 and out.count("[toy_digits score ") == 3
    assert "(conversation reset)" in out
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert len(lines) == 2
    first, second = lines
    assert set(first) == {"id", "messages", "tools", "metadata"} and first["id"].startswith("chat-")
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user", "assistant"]
    assert [m["content"] for m in second["messages"] if m["role"] == "user"] == ["good morning"]  # after /reset
    assert len(first["metadata"]["grades"]) == 2 and first["metadata"]["adapter"].endswith("adapter")


def test_chat_component_caches_the_model_and_replies_deterministically(tiny_model_dir):
    request = {"base_model": str(tiny_model_dir), **SMALL,
               "messages": [{"role": "user", "content": "hello"}]}
    with load_component("evaluator:chat") as chat:
        first = list(chat.run(request))[-1]
        session = next(iter(chat._sessions.values()))
        second = list(chat.run(request))[-1]
        assert next(iter(chat._sessions.values())) is session  # loaded once
        failed = list(chat.run({"messages": []}))[-1]
    assert first["type"] == second["type"] == "completed" and first["message"] == second["message"]
    assert first["message"]["role"] == "assistant" and first["tokens"] <= 4
    assert failed["type"] == "failed" and "messages" in failed["message"]


def test_chat_component_out_of_process(tiny_model_dir):
    request = {"base_model": str(tiny_model_dir), **SMALL, "messages": [{"role": "user", "content": "hello"}]}
    with load_component("evaluator:chat") as local:
        expected = list(local.run(request))[-1]
    with load_component("evaluator:chat", runtime="subprocess") as remote:
        events = list(remote.run(request))
    assert events[-1]["type"] == "completed" and events[-1]["message"] == expected["message"]
