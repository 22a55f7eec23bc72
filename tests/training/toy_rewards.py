"""Toy rewards, a tiny model builder and toy data for the training tests (importable by subprocess runs too)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from stateset_agents import Reward, TurnGrade

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "hello how can I help you today", "my order A1 has not arrived", "please refund order 42",
    "the answer is 7", "call the tool get_order with order_id", '{"name": "get_order", "arguments": {}}',
    "0123456789 digits 12 34 56 78 90", "thanks, goodbye", "what is 2 + 3 ? it is 5",
] * 4


def build_tiny_model(path: Path, vocab_size: int = 320, initializer_range: float = 0.2) -> None:
    """Byte-level BPE (round-trips any text exactly) + a 2-layer Llama with hidden size 32."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>",
                                   bos_token="<|im_start|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    torch.manual_seed(1234)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         pad_token_id=fast.pad_token_id, eos_token_id=fast.eos_token_id,
                         bos_token_id=fast.bos_token_id, tie_word_embeddings=False,
                         initializer_range=initializer_range)
    LlamaForCausalLM(config).save_pretrained(path)


def _text(message) -> str:
    return message.get("content") or ""


class DigitReward(Reward):
    """Learnable by a random tiny model: the share of the reply's characters that are digits."""

    name = "toy_digits"
    version = "1.0"

    def grade_turn(self, conversation, turn_index):
        if os.environ.get("TOY_REWARD_SLEEP"):
            time.sleep(float(os.environ["TOY_REWARD_SLEEP"]))
        text = _text(conversation["messages"][turn_index])
        digits = sum(c.isdigit() for c in text)
        score = digits / len(text) if text else 0.0
        return TurnGrade(score=score, breakdown={"digits": digits, "chars": len(text)}, reason="digit share")


class ToolCallReward(Reward):
    """1 when the turn calls the tool named in metadata['expected_tool'], else 0."""

    name = "toy_tool"
    version = "1.0"

    def grade_turn(self, conversation, turn_index):
        calls = conversation["messages"][turn_index].get("tool_calls") or []
        want = (conversation.get("metadata") or {}).get("expected_tool")
        hit = any(c["function"]["name"] == want for c in calls)
        return TurnGrade(score=1.0 if hit else 0.0, breakdown={"called": [c["function"]["name"] for c in calls]})


class NaNReward:
    """Duck-typed reward that breaks the contract: a NaN score (the engine must catch it)."""

    def identity(self):
        return {"name": "nan", "version": "0", "config_sha256": "0"}

    def grade(self, items):
        return [{"score": float("nan"), "applicable": True, "breakdown": {}, "reason": ""} for item in items
                for _ in item.turns]


def make_rows(n: int = 6) -> list[dict]:
    prompts = ["say a number", "what is 2 + 3", "my order A1 has not arrived", "please refund order 42",
               "hello", "thanks"]
    rows = []
    for i in range(n):
        p = prompts[i % len(prompts)]
        rows.append({"prompt": [{"role": "user", "content": p}],
                     "completion": {"role": "assistant", "content": f"the answer is {i}"},
                     "tools": [], "score": 1.0, "metadata": {},
                     "lineage": {"conversation_id": f"c{i}", "source_path": "logs/a.jsonl",
                                 "source_sha256": "ab" * 32, "line": i + 1, "turn_index": 1}})
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
