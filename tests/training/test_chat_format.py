"""Tool calls survive the template round trip, and multi-turn episodes replay the log only while calls match."""
from __future__ import annotations

import json

from stateset_plugins.models.batch import Generation
from stateset_plugins.models.chat_format import parse_assistant, same_call, to_text_messages
from stateset_plugins.models.rendering import ChatRenderer
from stateset_plugins.trainers.objectives import get_objective
from stateset_plugins.trainers.rollout import multi_turn

CALL = {"id": "call_9", "type": "function",
        "function": {"name": "get_order", "arguments": json.dumps({"order_id": "A1", "verbose": True})}}
TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}]


def test_tool_calls_survive_the_template_round_trip(tiny):
    _, tokenizer = tiny
    renderer = ChatRenderer(tokenizer, 512)
    prompt = [{"role": "user", "content": "where is my order A1?"}]
    completion = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    ids = renderer.completion_ids(prompt, completion, TOOLS)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert "<tool_call>" in text  # not the empty content the bare template would render
    parsed = parse_assistant(text)
    assert parsed["content"] is None and len(parsed["tool_calls"]) == 1
    assert same_call(parsed["tool_calls"][0], CALL)
    assert json.loads(parsed["tool_calls"][0]["function"]["arguments"]) == {"order_id": "A1", "verbose": True}
    rendered_prompt = renderer.text(prompt, TOOLS, generation_prompt=True)
    assert "<tools>" in rendered_prompt and "get_order" in rendered_prompt


def test_parse_keeps_text_and_ignores_broken_calls():
    msg = parse_assistant('Let me check.\n<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>'
                          '<tool_call>{not json}</tool_call>')
    assert msg["content"] == "Let me check.\n<tool_call>{not json}</tool_call>"
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["a"]
    assert parse_assistant("plain") == {"role": "assistant", "content": "plain"}
    assert to_text_messages([{"role": "tool", "tool_call_id": "x", "content": "ok"}]) == [
        {"role": "tool", "content": "ok"}]


class ScriptedBackend:
    """Returns given texts as generations (for testing the replay rules without a trained model)."""

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.calls = tokenizer, list(turns), 0

    def generate(self, prompts, *, max_new_tokens, temperature, adapter=True):
        out = []
        for _ in prompts:
            text = self.turns[min(self.calls, len(self.turns) - 1)]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Generation(ids=ids, logps=[-1.0] * len(ids), truncated=False))
        self.calls += 1
        return out


ROW = {"id": "c1", "prompt": [{"role": "user", "content": "where is A1?"}], "tools": TOOLS, "metadata": {},
       "completion": {"role": "assistant", "content": None, "tool_calls": [CALL]},
       "continuation": [{"role": "tool", "tool_call_id": "call_9", "content": "shipped"},
                        {"role": "assistant", "content": "It shipped."},
                        {"role": "user", "content": "thanks"},
                        {"role": "assistant", "content": "Bye."}]}
MATCH = '<tool_call>{"name": "get_order", "arguments": {"verbose": true, "order_id": "A1"}}</tool_call>'


def run(tiny, turns):
    _, tokenizer = tiny
    cfg = get_objective("multi_turn_grpo").Config(num_generations=2, max_turns=4, max_new_tokens=32)
    return multi_turn(ScriptedBackend(tokenizer, turns), ChatRenderer(tokenizer, 512), [ROW], ["c1"], cfg)


def test_matching_call_replays_the_tool_result_and_user_turns(tiny):
    ep = run(tiny, [MATCH, "It shipped.", "Bye."])[0]
    roles = [m["role"] for m in ep.conversation["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert ep.conversation["messages"][2]["content"] == "shipped"
    assert ep.graded_turns == [1, 3, 5] and ep.ended == "end_of_recording"
    s = ep.sample
    assert len(s.completion_ids) == len(s.sampled) == len(s.behaviour_logp)
    env = [i for i, m in enumerate(s.sampled) if not m]
    assert env and all(s.behaviour_logp[i] is None for i in env)  # environment tokens: no loss, no log-prob
    assert 0 < sum(s.sampled) < len(s.sampled)


def test_divergent_call_ends_the_episode_before_the_tool_result(tiny):
    wrong = '<tool_call>{"name": "get_order", "arguments": {"order_id": "B2"}}</tool_call>'
    for turns in ([wrong], ["I will not call anything."]):
        ep = run(tiny, turns)[0]
        assert ep.ended == "diverged"
        assert [m["role"] for m in ep.conversation["messages"]] == ["user", "assistant"]
        assert all(ep.sample.sampled)
