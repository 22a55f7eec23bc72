"""`--redact`: identifiers become stable placeholders; things that merely look numeric are left alone."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stateset_agents.pipeline.ingest import run_ingest
from stateset_agents.pipeline.redact import Redactor, redact_conversation

from .logs import read_outputs, write_jsonl


@pytest.mark.parametrize("text, redacted", [
    ("mail me at Jane.Doe+x@mail.example.co.uk.", "mail me at <EMAIL_1>."),
    ("call 555-123-4567 or (555) 123-4567", "call <PHONE_1> or <PHONE_1>"),
    ("call +44 20 7946 0958 today", "call <PHONE_1> today"),
    ("card 4111 1111 1111 1111, exp 12/27", "card <CARD_1>, exp 12/27"),
    ("card 4111-1111-1111-1111 or 4111111111111111", "card <CARD_1> or <CARD_1>"),
    ("iban DE89 3704 0044 0532 0130 00 please", "iban <IBAN_1> please"),
    ("iban GB82WEST12345698765432", "iban <IBAN_1>"),
    ("from 192.168.10.254 and 2001:db8:85a3::8a2e:370:7334", "from <IP_1> and <IP_2>"),
    ("ssn 123-45-6789", "ssn <SSN_1>"),
])
def test_identifiers_are_replaced(text, redacted):
    assert Redactor().text(text) == redacted


@pytest.mark.parametrize("text", [
    "order 1234567890123456",  # 16 digits, fails the Luhn check
    "ticket 5551234567 and user 100234567",  # bare digit runs are ids, not phone numbers
    "payment credit_card_7815826, reservation ZFA04Y, flight HAT001",
    "on 2024-05-15 15:00:00 EST, total $1,234.56, 3.14159",
    "version 10:30:00 and ids 000-12-3456 666-12-3456",  # times; SSN shapes with invalid areas
    "IBAN-like GB00WEST12345698765432 fails its checksum",
    "999.1.1.1 is no address",
])
def test_lookalikes_are_left_alone(text):
    redactor = Redactor()
    assert redactor.text(text) == text
    assert sum(redactor.counts.values()) == 0


def test_placeholders_are_stable_within_a_conversation_and_restart_per_conversation():
    def conv():
        return {"messages": [
            {"role": "user", "content": "I am bob@x.com, wife is amy@x.com"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "find_user", "arguments": '{"email": "AMY@x.com", "card": 4111111111111111}'}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "find_user", "content": '{"email": "bob@x.com"}'},
        ], "metadata": {"expected_tool_calls": [{"name": "find_user", "arguments": {"email": "amy@x.com"}}]}}

    first, second = conv(), conv()
    counts = redact_conversation(first)
    messages = first["messages"]
    assert messages[0]["content"] == "I am <EMAIL_1>, wife is <EMAIL_2>"
    arguments = messages[1]["tool_calls"][0]["function"]["arguments"]
    # A card logged as a bare JSON number: the arguments must stay valid JSON.
    assert json.loads(arguments) == {"email": "<EMAIL_2>", "card": "<CARD_1>"}
    assert json.loads(messages[2]["content"]) == {"email": "<EMAIL_1>"}
    assert first["metadata"]["expected_tool_calls"][0]["arguments"] == {"email": "<EMAIL_2>"}
    assert messages[2]["tool_call_id"] == "c1" and messages[1]["tool_calls"][0]["function"]["name"] == "find_user"
    assert counts == {"EMAIL": 5, "CARD": 1}
    redact_conversation(second)
    assert second == first


def test_arguments_keep_their_exact_form_when_redaction_does_not_break_them():
    conv = {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {
        "name": "f", "arguments": '{ "to" :  "bob@x.com" }'}}]}]}
    redact_conversation(conv)
    assert conv["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{ "to" :  "<EMAIL_1>" }'


def test_arguments_nested_too_deep_to_reserialise_are_still_redacted():
    # found by fuzzing: a bare card number 400 levels deep broke the JSON re-serialisation (orjson writes 254)
    deep = "[" * 400 + "4111111111111111" + "]" * 400
    conv = {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": deep}}]}]}
    counts = redact_conversation(conv)
    arguments = conv["messages"][0]["tool_calls"][0]["function"]["arguments"]
    assert "4111" not in arguments and "<CARD_1>" in arguments and counts == {"CARD": 1}


def test_ingest_counts_redactions_and_leaves_ids_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(Path("log.jsonl"), [
        {"id": "user-5551234567", "messages": [{"role": "user", "content": "me: a@b.io, 555-123-4567"},
                                               {"role": "assistant", "content": "Noted a@b.io."}]},
        {"id": "two", "messages": [{"role": "user", "content": "c@d.io from 10.0.0.1"}]},
    ])
    summary = run_ingest("openai", "log.jsonl", "out", redact=True)
    transcripts, _, _ = read_outputs(Path("out"))
    assert transcripts[0]["id"] == "user-5551234567"
    assert transcripts[0]["messages"][0]["content"] == "me: <EMAIL_1>, <PHONE_1>"
    assert transcripts[0]["messages"][1]["content"] == "Noted <EMAIL_1>."
    assert transcripts[1]["messages"][0]["content"] == "<EMAIL_1> from <IP_1>"
    assert summary["redactions"] == {"EMAIL": 3, "PHONE": 1, "CARD": 0, "IBAN": 0, "IP": 1, "SSN": 0}
