"""The official `openai` client against the gateway on loopback: models, completions streamed and not, tool calls
parsed from the model's text and sent back, usage counts, and errors in the API's shape."""
from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

from tests.gateway.gateway_helpers import GREETING, GREETING_REPLY, ORDER_QUESTION, TOOLS  # noqa: E402


@pytest.fixture()
def client(served):
    return openai.OpenAI(base_url=served.url + "/v1", api_key=served.keys["alice"], max_retries=0)


def test_models_lists_the_base_and_the_deployed_adapter(client, served):
    models = {m.id: m for m in client.models.list().data}
    assert set(models) == {served.base, served.adapter}
    assert models[served.adapter].model_extra["kind"] == "adapter"
    assert models[served.adapter].model_extra["run_id"] and models[served.base].model_extra["kind"] == "base"


def test_a_completion_has_the_taught_reply_and_exact_usage(client, served):
    messages = [{"role": "user", "content": GREETING}]
    reply = client.chat.completions.create(model=served.base, messages=messages, temperature=0, max_tokens=32)
    [choice] = reply.choices
    assert choice.message.content == GREETING_REPLY and choice.finish_reason == "stop"
    prompt_tokens = served.running.gateway.engine.count_tokens(messages, None)
    assert reply.usage.prompt_tokens == prompt_tokens
    # the reply's tokens and the end token
    assert reply.usage.completion_tokens == len(served.running.gateway.engine.tokenizer(GREETING_REPLY)["input_ids"]) + 1
    assert reply.usage.total_tokens == prompt_tokens + reply.usage.completion_tokens


def test_streaming_sends_the_same_reply_in_chunks_then_usage(client, served):
    stream = client.chat.completions.create(model=served.base, messages=[{"role": "user", "content": GREETING}],
                                            temperature=0, max_tokens=32, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == GREETING_REPLY
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # streamed, not one block
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_a_generated_tool_call_comes_back_as_tool_calls_and_round_trips(client, served):
    messages = [{"role": "user", "content": ORDER_QUESTION}]
    reply = client.chat.completions.create(model=served.base, messages=messages, tools=TOOLS, temperature=0,
                                           max_tokens=48)
    [choice] = reply.choices
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "get_order" and json.loads(call.function.arguments) == {"order_id": "A1"}
    assert call.id.startswith("call_")
    followed = client.chat.completions.create(model=served.adapter, tools=TOOLS, max_tokens=8, seed=3, messages=[
        *messages, choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"status": "shipped"})}])
    assert followed.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert followed.usage.prompt_tokens > reply.usage.prompt_tokens


def test_a_streamed_tool_call_shows_no_markup(client, served):
    chunks = list(client.chat.completions.create(model=served.base, tools=TOOLS, temperature=0, max_tokens=48,
                                                 stream=True, messages=[{"role": "user", "content": ORDER_QUESTION}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    assert "<tool_call>" not in text and [t.function.name for t in calls] == ["get_order"]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_sampling_with_a_seed_repeats_and_n_gives_choices(client, served):
    ask = dict(model=served.adapter, messages=[{"role": "user", "content": "count to five"}], temperature=1.0,
               top_p=0.9, max_tokens=12, seed=7, n=2)
    first, second = client.chat.completions.create(**ask), client.chat.completions.create(**ask)
    assert [c.message.content for c in first.choices] == [c.message.content for c in second.choices]
    assert [c.index for c in first.choices] == [0, 1]
    assert first.usage.completion_tokens > 0


def test_a_stop_sequence_ends_the_reply_before_it(client, served):
    reply = client.chat.completions.create(model=served.base, messages=[{"role": "user", "content": GREETING}],
                                           temperature=0, max_tokens=32, stop=["help"])
    assert reply.choices[0].message.content == "hello how can I" and reply.choices[0].finish_reason == "stop"


def test_an_unknown_model_is_404_in_the_api_shape(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body["code"] == "model_not_found" and caught.value.body["param"] == "model"


@pytest.mark.parametrize("change, field", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"temperature": 9}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 100000}, "max_tokens"),
    ({"n": 99}, "n"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
])
def test_a_malformed_request_is_400_naming_the_field(client, served, change, field):
    ask = {"model": served.base, "messages": [{"role": "user", "content": "hi"}], **change}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**ask)
    assert caught.value.status_code == 400 and caught.value.body["param"] == field


def test_too_long_a_prompt_is_400_naming_the_limit(client, served):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=served.base, messages=[{"role": "user", "content": "order " * 600}])
    assert "limit is 512" in caught.value.body["message"] and "max_prompt_tokens" in caught.value.body["message"]
