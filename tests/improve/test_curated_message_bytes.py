"""Curated rows serialise each message once, with short cuts for the common shapes (a plain message, a tool result,
an assistant message that calls tools). Each short cut must give the very bytes (and nullable-field bits) of the
general path, `dumps(normalise_message(m))`, and leave every other shape to it."""
from __future__ import annotations

import pytest

from stateset_agents.core.jsonio import dumps
from stateset_agents.pipeline.curated_rows import _message_bits, _message_json, normalise_message


def call(**changes):
    return {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": '{"id": "W1"}'},
            **changes}


MESSAGES = [
    {"role": "user", "content": "Where is W1?"},
    {"role": "system", "content": "\u2028é\"\n"},
    {"role": "user", "content": "hi", "name": "bob"},
    {"role": "tool", "content": "{}", "tool_call_id": "call_1", "name": "get_order"},
    {"role": "tool", "content": "{}", "tool_call_id": "call_1"},
    {"role": "tool", "content": "{}", "tool_call_id": "", "name": ""},
    {"role": "tool", "content": "{}", "tool_call_id": 7, "name": "get_order"},  # not a string: str() of it
    {"role": "tool", "content": "{}", "tool_call_id": "call_1", "name": 3},
    {"role": "tool", "content": None, "tool_call_id": "call_1"},
    {"role": "assistant", "content": None, "tool_calls": [call()]},
    {"role": "assistant", "content": "Looking it up.", "tool_calls": [call(), call(id="call_2")]},
    {"role": "assistant", "content": [{"type": "text", "text": "parts"}], "tool_calls": [call()]},
    {"role": "assistant", "content": None, "tool_calls": [call(id="")]},  # empty id: normalised to ""
    {"role": "assistant", "content": None, "tool_calls": [call(type=None)]},  # type defaults to "function"
    {"role": "assistant", "content": None, "tool_calls": [call(id=5)]},
    {"role": "assistant", "content": None, "tool_calls": [call(extra=1)]},  # keys beyond the schema are dropped
    {"role": "assistant", "content": None, "tool_calls": [call(function={"name": "f", "arguments": {"a": 1}})]},
    {"role": "assistant", "content": None, "tool_calls": [call(function={"arguments": "{}"})]},
    {"role": "assistant", "content": None, "tool_calls": [call(function={"name": "f", "arguments": "{}", "x": 1})]},
    {"role": "assistant", "content": None, "tool_calls": [call()], "name": "bot"},
    {"role": "assistant", "content": None, "tool_calls": ["not a call"]},
    {"role": "assistant", "content": None, "tool_calls": (call(),)},
    {"role": "assistant", "content": None, "tool_calls": []},
    {"role": "robot", "content": None, "tool_calls": [call()]},
]


@pytest.mark.parametrize("message", MESSAGES, ids=range(len(MESSAGES)))
def test_every_short_cut_writes_the_general_paths_bytes(message):
    normal = normalise_message(message)
    assert _message_json(message) == (dumps(normal), _message_bits(normal))
