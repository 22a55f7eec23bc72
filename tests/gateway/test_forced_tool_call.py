"""tool_choice that forces a call (OpenAI `required` / a named function, Anthropic `any` / `tool`): the reply starts
with the call's opening markup, so the model cannot answer in prose. A model taught to answer the greeting in prose
when free, and to complete the call when its reply is started for it, proves the request reaches the engine forced:
without forcing, the same request gets the prose."""
from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
pytest.importorskip("torch")

from stateset_agents.plugin_api.serving import GenerationRequest  # noqa: E402
from tests.gateway.gateway_helpers import ANTHROPIC_TOOLS, GREETING, GREETING_REPLY, TOOLS, teach  # noqa: E402

ANY = '<tool_call>{"name": "'
NAMED = ANY[:-1] + '"get_order", "arguments": '
CALL_REST = '{"order_id": "A1"}}</tool_call>'
GREET = [{"role": "user", "content": GREETING}]


@pytest.fixture(scope="module")
def forced_server(tiny_model_dir, tmp_path_factory):
    from stateset_agents.gateway.keys import create_key
    from stateset_agents.gateway.messages_api import to_chat_tools
    from stateset_agents.gateway.server import Options, start

    anthropic_tools = to_chat_tools(ANTHROPIC_TOOLS)
    model = teach(tiny_model_dir, tmp_path_factory.mktemp("forced-model"), [
        (GREET, TOOLS, GREETING_REPLY), (GREET, anthropic_tools, GREETING_REPLY),
        (GREET, TOOLS, CALL_REST, NAMED), (GREET, anthropic_tools, CALL_REST, NAMED),
        (GREET, TOOLS, 'get_order", "arguments": ' + CALL_REST, ANY),
        (GREET, anthropic_tools, 'get_order", "arguments": ' + CALL_REST, ANY)])
    registry = tmp_path_factory.mktemp("forced-registry")
    key = create_key(registry, "alice", "infer")[0]
    running = start(Options(registry=str(registry), base_model=str(model), port=0, state=False,
                            engine_config={"max_new_tokens": 48, "max_prompt_tokens": 512}))
    base = next(m["id"] for m in running.gateway.engine.models() if m["kind"] == "base")
    yield running, base, key
    running.stop()


@pytest.fixture()
def client(forced_server):
    running, _, key = forced_server
    return openai.OpenAI(base_url=running.url + "/v1", api_key=key, max_retries=0)


def test_the_forced_start_ends_the_prompt(forced_server):
    from stateset_plugins.serving.engine import tool_prefix

    running, base, _ = forced_server
    engine = running.gateway.engine
    free = engine._render(GREET, TOOLS)
    for force, expected in (("", ANY), ("get_order", NAMED)):
        request = GenerationRequest(model=base, messages=GREET, tools=TOOLS, force_tool=force)
        assert tool_prefix(request) == expected
        forced = engine._render(GREET, TOOLS, expected)
        assert forced[:len(free)] == free and engine.tokenizer.decode(forced[len(free):]) == expected
    with pytest.raises(Exception, match="needs tools"):
        tool_prefix(GenerationRequest(model=base, messages=GREET, force_tool=""))


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_order"}}])
def test_openai_required_and_named_force_the_call_that_auto_leaves_out(client, forced_server, choice):
    base = forced_server[1]
    free = client.chat.completions.create(model=base, messages=GREET, tools=TOOLS, temperature=0, max_tokens=40)
    assert free.choices[0].message.content == GREETING_REPLY and not free.choices[0].message.tool_calls
    forced = client.chat.completions.create(model=base, messages=GREET, tools=TOOLS, tool_choice=choice,
                                            temperature=0, max_tokens=40).choices[0]
    if forced.message.tool_calls:  # the taught continuation closed the call
        [call] = forced.message.tool_calls
        assert call.function.name == "get_order" and call.function.arguments == '{"order_id": "A1"}'
        assert not forced.message.content and forced.finish_reason == "tool_calls"
    else:  # a model that does not close the call keeps it in the content: it still starts with the forced markup
        assert (forced.message.content or "").startswith(ANY), forced.message.content


def test_a_streamed_forced_call_shows_no_markup(client, forced_server):
    chunks = list(client.chat.completions.create(model=forced_server[1], messages=GREET, tools=TOOLS,
                                                 tool_choice="required", temperature=0, max_tokens=40, stream=True))
    shown = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    if calls:  # the call closed: no markup was shown on the way
        assert shown == "" and [t.function.name for t in calls] == ["get_order"]
    else:  # not closed: only the unparsed call comes at the end, never the free prose
        assert shown.startswith(ANY), shown


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_order"}])
def test_anthropic_any_and_tool_force_the_call(forced_server, choice):
    running, base, key = forced_server
    client = anthropic.Anthropic(base_url=running.url, api_key=key, max_retries=0)
    # temperature 0: the Messages API samples at 1.0 by default, which made this test a draw (CI once got
    # "hello how can ments": you today")
    free = client.messages.create(model=base, max_tokens=40, messages=GREET, tools=ANTHROPIC_TOOLS,
                                  extra_body={"temperature": 0})
    assert [b.type for b in free.content] == ["text"] and free.content[0].text == GREETING_REPLY
    forced = client.messages.create(model=base, max_tokens=40, messages=GREET, tools=ANTHROPIC_TOOLS,
                                    tool_choice=choice, extra_body={"temperature": 0})
    uses = [(b.name, b.input) for b in forced.content if b.type == "tool_use"]
    if uses:  # the taught continuation closed the call
        assert uses == [("get_order", {"order_id": "A1"})] and forced.stop_reason == "tool_use"
    else:  # not closed: the text still starts with the forced markup, never the free prose
        text = "".join(b.text for b in forced.content if b.type == "text")
        assert text.startswith(ANY) and text != GREETING_REPLY, forced.content


def test_a_forced_choice_without_its_tool_is_refused(client, forced_server):
    running, base, key = forced_server
    with pytest.raises(openai.BadRequestError, match="needs tools"):
        client.chat.completions.create(model=base, messages=GREET, tool_choice="required", max_tokens=8)
    client = anthropic.Anthropic(base_url=running.url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="not among the tools"):
        client.messages.create(model=base, max_tokens=8, messages=GREET, tools=ANTHROPIC_TOOLS,
                               tool_choice={"type": "tool", "name": "cancel_order"})
