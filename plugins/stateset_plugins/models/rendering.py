"""Tokenisation: conversations to token ids through the tokenizer's chat template, with tool calls in the text
form of `chat_format`, as training renders prompts and completions and evaluation renders prompts."""
from __future__ import annotations

from typing import Mapping, Sequence

from stateset_agents.core.errors import InputError

from .chat_format import to_text_messages


class ChatRenderer:
    """Messages -> token ids through the tokenizer's chat template, tool calls in the text form of `chat_format`."""

    def __init__(self, tokenizer, max_prompt_tokens: int):
        if not getattr(tokenizer, "chat_template", None):
            raise InputError("the tokenizer has no chat template; training renders conversations with it")
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.eos_text = tokenizer.eos_token or ""

    def text(self, messages: Sequence[Mapping], tools=None, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(to_text_messages(messages, tools), tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages, tools=None) -> list[int]:
        ids = self.encode(self.text(messages, tools, generation_prompt=True))
        return ids[-self.max_prompt_tokens:]  # keep the end: the turn being answered

    def completion_ids(self, messages, completion, tools=None) -> list[int]:
        """The completion as the template renders it after the generation prompt, through its end token."""
        before = self.text(messages, tools, generation_prompt=True)
        full = self.text(list(messages) + [completion], tools)
        if not full.startswith(before):
            raise InputError("the chat template does not render the completion as a continuation of the prompt")
        text = full[len(before):]
        if self.eos_text and self.eos_text in text:
            text = text[:text.index(self.eos_text) + len(self.eos_text)]
        return self.encode(text)

    def continuation_ids(self, history, new_messages, tools=None) -> list[int]:
        """Tokens that follow a sampled assistant turn (which ended at its end token): the template's text after
        that turn, the replayed messages, and the next generation prompt."""
        done = self.text(history, tools)
        after = self.text(list(history) + list(new_messages), tools, generation_prompt=True)
        if not after.startswith(done):
            raise InputError("the chat template does not render a conversation incrementally")
        tail = ""
        if self.eos_text and self.eos_text in done:
            tail = done[done.rindex(self.eos_text) + len(self.eos_text):]
        return self.encode(tail + after[len(done):])
