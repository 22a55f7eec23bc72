"""Property tests of the message checker every format shares (plugins/stateset_plugins/ingestors/messages.py): any
JSON value is either a normalised message or a LineError naming a field under the one asked about; the fast path
agrees with the full check; normalising is idempotent, puts keys in canonical order, and drops nothing."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stateset_plugins.ingestors.messages import (
    MESSAGE_KEYS,
    LineError,
    _normalise_full,
    _plain_message,
    check_tool_results,
    normalise_message,
    normalise_messages,
)
from tests.helpers.fuzzing import examples

from .corpus import KEYS, LINE_REASONS, hot_values, json_values, mutated, seed_records

# Messages: real ones mutated, and dicts of the keys the checker reads with values it cares about.
message_like = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), hot_values, max_size=6),
    seed_records.flatmap(lambda r: st.sampled_from(r["messages"])).flatmap(lambda m: st.one_of(st.just(m),
                                                                                               mutated(m))),
    json_values,
)


def _check_error(exc: LineError, field: str) -> None:
    assert exc.reason in LINE_REASONS and exc.detail
    assert exc.field is None or exc.field.startswith(field), (exc.field, field)


@given(message=message_like)
@examples(300)
def test_a_message_is_normalised_or_rejected_with_its_field(message):
    # Shallow records, compared by identity: values may nest past what Python compares or copies recursively.
    before = [(k, id(v)) for k, v in message.items()] if isinstance(message, dict) else None
    try:
        out = normalise_message(message, "messages[3]")
    except LineError as exc:
        _check_error(exc, "messages[3]")
        assert before is None or [(k, id(v)) for k, v in message.items()] == before  # left as it was
        return
    keys = list(out)
    assert keys[0] == "role"
    contract = [k for k in keys if k in MESSAGE_KEYS]
    assert contract == [k for k in MESSAGE_KEYS if k in contract]
    assert keys[:len(contract)] == contract  # contract keys first, in order, then the log's own keys
    assert set(keys) == {k for k, _ in before} - ({"tool_calls"} if message.get("tool_calls") is None else set())
    again = normalise_message(dict(out), "m")  # idempotent
    # Equal (rebuilt tool calls hold the same nested objects, so comparing never recurses deep).
    assert list(again) == keys and all(again[k] is out[k] or again[k] == out[k] for k in keys)


@given(message=message_like)
@examples(300)
def test_the_fast_path_agrees_with_the_full_check(message):
    plain = _plain_message(message) if isinstance(message, dict) else None
    if plain is not None:
        assert list(plain.items()) == list(_normalise_full(message, "m").items())


@given(messages=st.one_of(st.lists(message_like, max_size=5), json_values, seed_records.map(lambda r: r["messages"])))
@examples(200)
def test_a_message_list_is_checked_whole(messages):
    try:
        out = normalise_messages(messages, "messages")
        check_tool_results(out, lambda i: f"messages[{i}]")
    except LineError as exc:
        _check_error(exc, "messages")
        return
    assert isinstance(out, list) and len(out) == len(messages) > 0
    called = {c.get("id") for m in out for c in m.get("tool_calls") or ()}
    assert all(m["tool_call_id"] in called for m in out if m["role"] == "tool")
