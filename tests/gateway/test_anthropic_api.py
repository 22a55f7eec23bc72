"""The official `anthropic` client against the gateway: messages streamed and not, tool_use / tool_result round
trip, count_tokens, stop sequences, and errors in the Messages API's shape."""
from __future__ import annotations

import pytest

anthropic = pytest.importorskip("anthropic")

from tests.gateway.gateway_helpers import ANTHROPIC_TOOLS, GREETING, GREETING_REPLY, ORDER_QUESTION  # noqa: E402


@pytest.fixture()
def client(served):
    return anthropic.Anthropic(base_url=served.url, api_key=served.keys["alice"], max_retries=0)


def test_a_message_has_the_taught_reply_and_usage(client, served):
    message = client.messages.create(model=served.base, max_tokens=32, extra_body={"temperature": 0},
                                     messages=[{"role": "user", "content": GREETING}])
    assert [b.type for b in message.content] == ["text"] and message.content[0].text == GREETING_REPLY
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    counted = client.messages.count_tokens(model=served.base, messages=[{"role": "user", "content": GREETING}])
    assert message.usage.input_tokens == counted.input_tokens > 0


def test_the_stream_has_every_event_and_the_same_reply(client, served):
    with client.messages.stream(model=served.base, max_tokens=32, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": GREETING}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(kinds)
    assert final.content[0].text == GREETING_REPLY and final.stop_reason == "end_turn"


def test_tool_use_round_trips(client, served):
    ask = [{"role": "user", "content": ORDER_QUESTION}]
    message = client.messages.create(model=served.base, max_tokens=48, extra_body={"temperature": 0}, tools=ANTHROPIC_TOOLS,
                                     messages=ask)
    assert message.stop_reason == "tool_use"
    [use] = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "get_order" and use.input == {"order_id": "A1"} and use.id.startswith("toolu_")
    with client.messages.stream(model=served.base, max_tokens=48, extra_body={"temperature": 0}, tools=ANTHROPIC_TOOLS,
                                messages=ask) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "tool_use" and streamed.content[-1].input == {"order_id": "A1"}
    followed = client.messages.create(model=served.adapter, max_tokens=8, tools=ANTHROPIC_TOOLS, messages=[
        *ask, {"role": "assistant", "content": [b.model_dump() for b in message.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "shipped"}]}])
    assert followed.usage.input_tokens > message.usage.input_tokens


def test_a_stop_sequence_is_reported(client, served):
    message = client.messages.create(model=served.base, max_tokens=32, extra_body={"temperature": 0}, stop_sequences=["help"],
                                     messages=[{"role": "user", "content": GREETING}])
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "help"
    assert message.content[0].text == "hello how can I"


def test_errors_have_the_messages_shape(client, served):
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=served.base, max_tokens=8, messages=[{"role": "system", "content": "hi"}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in caught.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model=served.base, max_tokens=8, messages=[{"role": "user", "content": "a " * 900}])
    assert "limit is 512" in caught.value.body["error"]["message"]
