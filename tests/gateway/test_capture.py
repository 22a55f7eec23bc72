"""Capture: what the gateway writes is what ingest reads. Captured calls -> ingest -> improve run equals, byte for
byte, the same calls logged by hand (redaction off); with redaction on no e-mail address or phone number survives
in the capture or in what ingest makes of it."""
from __future__ import annotations

import json

import httpx
import orjson
import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from stateset_agents.cli import main  # noqa: E402
from tests.gateway.gateway_helpers import ANTHROPIC_TOOLS, GREETING, ORDER_QUESTION, TOOLS  # noqa: E402

INGEST_FORMAT = "openai"
PII = ("jane.doe@example.com", "+1 415 555 0100")


def _reply(message) -> dict:
    """The assistant message as a client logs what it got."""
    out = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": c.function.arguments}}
                             for c in message.tool_calls]
    return out


def _call(request: dict, reply, conversation: str | None = None) -> dict:
    line = {"conversation_id": conversation} if conversation else {}
    choice = reply.choices[0]
    usage = {"prompt_tokens": reply.usage.prompt_tokens, "completion_tokens": reply.usage.completion_tokens,
             "total_tokens": reply.usage.total_tokens}
    return {**line, "request": request, "response": {
        "choices": [{"index": 0, "message": _reply(choice.message), "finish_reason": choice.finish_reason}],
        "usage": usage}}


def _conversations(url: str, base: str) -> list[dict]:
    """Two conversations (stitched by the id header, and by message prefix); the call-log lines a client would
    write for them by hand."""
    chat = openai.OpenAI(base_url=url + "/v1", api_key="-", max_retries=0)
    hand = []
    # 1: two turns, stitched by the conversation id header
    first = [{"role": "user", "content": GREETING}]
    r1 = chat.chat.completions.create(model=base, messages=first, temperature=0, max_tokens=16,
                                      extra_headers={"x-conversation-id": "conv-A"})
    hand.append(_call({"model": base, "messages": first, "temperature": 0, "max_tokens": 16}, r1, "conv-A"))
    second = [*first, _reply(r1.choices[0].message), {"role": "user", "content": "thanks, goodbye"}]
    r2 = chat.chat.completions.create(model=base, messages=second, temperature=0, max_tokens=16,
                                      extra_headers={"x-conversation-id": "conv-A"})
    hand.append(_call({"model": base, "messages": second, "temperature": 0, "max_tokens": 16}, r2, "conv-A"))
    # 2: a tool call and its result, stitched by message prefix
    ask = [{"role": "user", "content": ORDER_QUESTION}]
    r3 = chat.chat.completions.create(model=base, messages=ask, tools=TOOLS, temperature=0, max_tokens=48)
    hand.append(_call({"model": base, "messages": ask, "tools": TOOLS, "temperature": 0, "max_tokens": 48}, r3))
    call = r3.choices[0].message.tool_calls[0]
    after = [*ask, _reply(r3.choices[0].message),
             {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"status": "shipped"})}]
    r4 = chat.chat.completions.create(model=base, messages=after, tools=TOOLS, temperature=0, max_tokens=16)
    hand.append(_call({"model": base, "messages": after, "tools": TOOLS, "temperature": 0, "max_tokens": 16}, r4))
    return hand


def _ingest_and_improve(root, monkeypatch) -> dict[str, bytes]:
    monkeypatch.chdir(root)  # relative paths: the outputs name the input as "logs/..." in both runs
    assert main(["ingest", "--format", INGEST_FORMAT, "--input", "logs", "--output", "ingested"]) == 0
    assert main(["improve", "run", "--transcripts", "ingested", "--reward", "customer_support", "--output",
                 "improved", "--held-out", "0"]) == 0
    names = ["ingested/transcripts.jsonl", "ingested/rejects.jsonl", "ingested/ingest_summary.json",
             "improved/graded.jsonl", "improved/curated.jsonl"]
    return {name: (root / name).read_bytes() for name in names}


def test_capture_ingests_and_improves_byte_for_byte_as_the_same_calls_logged_by_hand(taught_model, tmp_path,
                                                                                      monkeypatch):
    from stateset_agents.gateway.server import Options, start

    captured_root, hand_root = tmp_path / "captured", tmp_path / "hand"
    running = start(Options(base_model=str(taught_model), port=0, capture=str(captured_root / "logs"),
                            capture_raw=True))
    try:
        hand = _conversations(running.url, running.gateway.engine.models()[0]["id"])
    finally:
        running.stop()
    [captured_file] = sorted((captured_root / "logs").iterdir())
    (hand_root / "logs").mkdir(parents=True)
    (hand_root / "logs" / captured_file.name).write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in hand))
    captured, logged = _ingest_and_improve(captured_root, monkeypatch), _ingest_and_improve(hand_root, monkeypatch)
    assert captured == logged
    transcripts = [json.loads(line) for line in captured["ingested/transcripts.jsonl"].splitlines()]
    assert [len(t["messages"]) for t in transcripts] == [4, 4]  # two conversations, each whole
    assert [t["source"]["unstitched"] for t in transcripts] == [False, False]
    assert transcripts[0]["id"] == "conv-A" and transcripts[1]["messages"][1]["tool_calls"]


def test_redaction_is_on_by_default_and_no_email_or_phone_survives(served, tmp_path, monkeypatch):
    key = served.keys["bob"]
    text = f"mail me at {PII[0]} or call {PII[1]} about order A1"
    openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0).chat.completions.create(
        model=served.adapter, messages=[{"role": "user", "content": text}], max_tokens=4,
        metadata={"conversation_id": "pii-1"})
    anthropic.Anthropic(base_url=served.url, api_key=key, max_retries=0).messages.create(
        model=served.base, max_tokens=4, system=f"the customer is {PII[0]}", tools=ANTHROPIC_TOOLS,
        messages=[{"role": "user", "content": text}])
    files = httpx.get(served.url + "/v1/captures", headers={"x-api-key": key}).json()
    assert files["redacted"] is True and files["data"]
    raw = b"".join(httpx.get(f"{served.url}/v1/captures/{f['file']}", headers={"x-api-key": key}).content
                   for f in files["data"])
    assert b"<EMAIL_1>" in raw and b"<PHONE_1>" in raw
    assert not any(p.encode() in raw for p in PII)
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in files["data"]:
        (logs / f["file"]).write_bytes((served.capture / f["file"]).read_bytes())
    assert main(["ingest", "--format", INGEST_FORMAT, "--input", str(logs), "--output", str(tmp_path / "out")]) == 0
    transcripts = (tmp_path / "out" / "transcripts.jsonl").read_text()
    assert transcripts.count("\n") == 2 and not any(p in transcripts for p in PII)


def test_capture_rotates_by_size_and_keeps_each_conversation_in_its_file(tmp_path, monkeypatch):
    from stateset_agents.gateway.capture import Capture

    capture = Capture(tmp_path / "logs", redact=False, max_bytes=300)
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}

    def call(conversation, messages, answer):
        reply = {"role": "assistant", "content": answer}
        path = capture.record("alice", conversation, {"model": "m", "messages": messages}, [
            {"index": 0, "message": reply, "finish_reason": "stop"}], usage)
        return path.name, [*messages, reply]

    first, a = call("conv-A", [{"role": "user", "content": "first question " * 10}], "first answer")
    # conversation B (no id) starts after the first file is past its size: a new file
    second, b = call(None, [{"role": "user", "content": "another question"}], "another answer")
    assert (first, second) == ("alice-000001.jsonl", "alice-000002.jsonl")
    # each continuation stays in the file its conversation started in: by id, and by message prefix
    assert call("conv-A", [*a, {"role": "user", "content": "and then?"}], "then this")[0] == first
    assert call(None, [*b, {"role": "user", "content": "more"}], "more answers")[0] == second
    assert [f["file"] for f in capture.files("alice")] == [first, second] and capture.files("bob") == []
    monkeypatch.chdir(tmp_path)
    assert main(["ingest", "--format", INGEST_FORMAT, "--input", "logs", "--output", "out"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "transcripts.jsonl").read_text().splitlines()]
    assert sorted(len(r["messages"]) for r in rows) == [4, 4]
    assert not any(r["source"]["unstitched"] for r in rows)
