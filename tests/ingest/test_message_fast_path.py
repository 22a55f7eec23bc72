"""The fast path for plain messages (`_plain_message`) and the full check (`_normalise_full`) agree: over many
message shapes, valid and invalid, the fast path either declines (None) or returns exactly what the full path
returns, with the same key order all the way down."""
from __future__ import annotations

import itertools
import random
from typing import Any

from stateset_plugins.ingestors.messages import LineError, _normalise_full, _plain_message, normalise_messages

MISSING = object()  # a key left out of the message

ROLES = ("system", "developer", "user", "assistant", "tool", "bot", None, 1, MISSING)
CONTENTS = ("hi", "", None, [], [{"type": "text", "text": "x"}], [{"type": "image_url", "image_url": {"url": "u"}}],
            [{"text": "x"}], [{"type": 1}], [{"type": "text"}], ["x"], 5, {"type": "text"}, True, MISSING)
CALL_IDS = ("c1", "", None, 1, True, MISSING)
NAMES = ("get_weather", "", None, 1, MISSING)


def plain_call(i: int = 0) -> dict[str, Any]:
    return {"id": f"c{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "P"}'}}


TOOL_CALLS = (MISSING, None, [], "x", {}, [plain_call()], [plain_call(0), plain_call(1)], [None],
              [{"function": {"name": "f", "arguments": "{}"}}], [{**plain_call(), "id": 1}],
              [{"type": "function", "id": "c0", "function": {"name": "f", "arguments": "{}"}}])


def message(keys: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: v for k, v in keys if v is not MISSING}


def random_call(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice([None, "call", 1, []])
    function: dict[str, Any] = {"name": rng.choice(["f", "get_weather", "", None, 1]) if rng.random() < 0.3
                                else "f",
                                "arguments": rng.choice(["{}", "not json", {"a": 1}, [1], None, 1]) if
                                rng.random() < 0.3 else '{"a": 1}'}
    if rng.random() < 0.1:
        del function[rng.choice(["name", "arguments"])]
    if rng.random() < 0.1:
        function["description"] = "extra"
    if rng.random() < 0.2:
        function = dict(reversed(function.items()))
    call: dict[str, Any] = {"id": rng.choice(["c1", "", 1, None]) if rng.random() < 0.2 else "c1",
                            "type": rng.choice(["function", "", 1, None]) if rng.random() < 0.2 else "function",
                            "function": rng.choice([function, None, "f", []]) if rng.random() < 0.1 else function}
    for key in ("id", "type", "function"):
        if rng.random() < 0.07:
            del call[key]
    if rng.random() < 0.1:
        call["index"] = 0
    if rng.random() < 0.2:
        items = list(call.items())
        rng.shuffle(items)
        call = dict(items)
    return call


def random_message(rng: random.Random) -> dict[str, Any]:
    """A plausible message for its role, then a few of its parts swapped for odd values, keys added or reordered."""
    role = rng.choice(("system", "developer", "user", "assistant", "tool"))
    keys = [("role", role), ("content", rng.choice(("hello", "", None)) if role == "assistant" else "hello"),
            ("tool_calls", [random_call(rng) for _ in range(rng.randrange(4))] if role == "assistant" and
             rng.random() < 0.5 else MISSING),
            ("tool_call_id", "c1" if role == "tool" else MISSING),
            ("name", rng.choice(("get_weather", MISSING)) if role in ("tool", "user") else MISSING)]
    odd = dict(role=ROLES, content=CONTENTS, tool_calls=TOOL_CALLS, tool_call_id=CALL_IDS, name=NAMES)
    keys = [(k, rng.choice(odd[k]) if rng.random() < 0.1 else v) for k, v in keys]
    for extra, value in (("refusal", None), ("annotations", []), ("audio", {"id": "a"})):
        if rng.random() < 0.05:
            keys.insert(rng.randrange(len(keys) + 1), (extra, value))
    if rng.random() < 0.3:
        rng.shuffle(keys)
    return message(keys)


def shape(value: Any) -> Any:
    """`value` with every dict's key order and every scalar's type made part of what `==` compares."""
    if isinstance(value, dict):
        return ("dict", [(k, shape(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [shape(v) for v in value])
    return (type(value).__name__, value)


def agree(m: dict[str, Any], counts: dict[str, int]) -> None:
    plain = _plain_message(m)
    try:
        full = _normalise_full(m, "messages[0]")
    except LineError:
        full = None
    if plain is None:
        counts["declined, invalid" if full is None else "declined, valid"] += 1
        return
    assert full is not None, f"the fast path accepted a message the full check rejects: {m!r}"
    assert shape(plain) == shape(full), f"the paths disagree on {m!r}: {plain!r} != {full!r}"
    counts["fast, as is" if plain is m else "fast, reordered"] += 1


def test_every_combination_of_contract_values_agrees():
    counts: dict[str, int] = dict.fromkeys(("fast, as is", "fast, reordered", "declined, valid",
                                            "declined, invalid"), 0)
    for role, content, calls, call_id, name in itertools.product(ROLES, CONTENTS, TOOL_CALLS, CALL_IDS, NAMES):
        keys = [("role", role), ("content", content), ("tool_calls", calls), ("tool_call_id", call_id),
                ("name", name)]
        agree(message(keys), counts)
        agree(message(keys[::-1]), counts)
    assert all(counts.values()), counts  # every outcome was reached


def test_seeded_random_messages_agree():
    rng = random.Random(20240611)
    counts: dict[str, int] = dict.fromkeys(("fast, as is", "fast, reordered", "declined, valid",
                                            "declined, invalid"), 0)
    for _ in range(30_000):
        agree(random_message(rng), counts)
    assert all(counts.values()), counts


def test_normalise_messages_takes_either_path_with_the_same_result():
    rng = random.Random(7)
    messages = []
    while len(messages) < 500:
        m = random_message(rng)
        try:
            _normalise_full(m, "x")
        except LineError:
            continue
        messages.append(m)
    out = normalise_messages(messages, "messages")
    assert shape(out) == shape([_normalise_full(m, "x") for m in messages])
