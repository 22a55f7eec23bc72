"""A tiny, randomly initialised Llama-style model with a tokenizer trained offline: for tests, benchmarks and
`quickstart --fast`. Nothing is downloaded."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

# ChatML that prints only `content`, like SmolLM2's template: tool calls must be rendered into the text.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DEFAULT_CORPUS = [
    "hello how can I help you today", "my order A1 has not arrived", "please refund order 42",
    "the answer is 7", "call the tool get_order with order_id", '{"name": "get_order", "arguments": {}}',
    "0123456789 digits 12 34 56 78 90", "thanks, goodbye", "what is 2 + 3 ? it is 5",
] * 4


def build_tiny_model(path: str | Path, vocab_size: int = 320, initializer_range: float = 0.2,
                     corpus: Iterable[str] | None = None, hidden_size: int = 32, layers: int = 2,
                     seed: int = 1234) -> Path:
    """Byte-level BPE (round-trips any text exactly) + a small Llama, saved to `path`.

    `initializer_range` is 0.2 rather than Llama's 0.02: at 0.02 the outputs are near-uniform and a toy reward
    gives no learning signal within a few steps.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(corpus) if corpus is not None else DEFAULT_CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|im_end|>",
                                   bos_token="<|im_start|>")
    fast.chat_template = CHAT_TEMPLATE
    path = Path(path)
    fast.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, pad_token_id=fast.pad_token_id,
                         eos_token_id=fast.eos_token_id, bos_token_id=fast.bos_token_id,
                         tie_word_embeddings=False, initializer_range=initializer_range)
    LlamaForCausalLM(config).save_pretrained(path)
    return path
