"""One rule for the visible text of a message (`stateset_agents.plugin_api.text`), and the places that read
message text (improve's curated rows, the overlap check, the rewards, the training text) all follow it."""
from __future__ import annotations

import pytest

from stateset_agents.plugin_api.text import content_text, message_text

TWO_PARTS = [{"type": "text", "text": "Where is"}, {"type": "text", "text": "A1?"}]


@pytest.mark.parametrize("content, text", [
    (None, ""),
    ("hello", "hello"),
    ("", ""),
    (TWO_PARTS, "Where is\nA1?"),  # parts are separate pieces of text: a newline between them, never glued
    ([{"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "see"}], "see"),
    (["plain", {"text": "typed"}], "plain\ntyped"),
    ([{"type": "text"}, 5], ""),  # no text in either part
    ([], ""),
    ({"ok": True, "n": 2}, '{"ok":true,"n":2}'),  # a tool result logged as an object: JSON a reward can parse
    (7, "7"),
])
def test_the_rule(content, text):
    assert content_text(content) == text
    assert message_text({"role": "user", "content": content}) == text


def test_every_reader_follows_the_rule():
    from stateset_agents.pipeline.curated_rows import normalise_message, split_key
    from stateset_agents.plugin_api.overlap import exact_key
    from stateset_plugins.models.chat_format import to_text_message
    from stateset_plugins.rewards import _grounding, _support_conversation, _tools, gsm8k, nsr

    message = {"role": "user", "content": TWO_PARTS}
    assert normalise_message(message)["content"] == "Where is\nA1?"  # curated.jsonl
    assert to_text_message(message)["content"] == "Where is\nA1?"  # the chat template's input
    assert split_key([message]) == split_key([{"role": "user", "content": "Where is\nA1?"}])
    assert exact_key([message]) == exact_key([{"role": "user", "content": "Where is\nA1?"}])
    for reward_module in (_grounding, _support_conversation, _tools, gsm8k, nsr):  # customer_support's reads
        assert reward_module.message_text is message_text
