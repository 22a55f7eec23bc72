"""Scoring a batch: the log-probs of its completions, with the prompt's work shared where rows share it.

The update and the scoring passes (reference, old policy, values) all call `completion_logprobs`. Rows of a batch
often repeat their prompt (a GRPO group's G samples) or start alike (a system prompt and tool declarations): that
work is computed once and its keys and values repeated to the rows, with gradient or without
(``prompt_gradient``).
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from .batch import Batch

# The forward-pass work (repeated prompt tokens x parameters) a shared prompt prefill must save before it is used:
# below it the extra forward call costs more than it saves (a tiny model is all per-call overhead; an accelerator
# computes a few repeated prompts in less time than the extra call's kernel launches take).
SHARED_PREFILL_MIN_WORK = {"cpu": 2e8, "accelerator": 5e11}


def saves_enough(saved_tokens: int, parameters: int, device: torch.device) -> bool:
    """Whether computing `saved_tokens` fewer prompt positions pays for the extra forward call sharing costs."""
    floor = SHARED_PREFILL_MIN_WORK["cpu" if device.type == "cpu" else "accelerator"]
    return saved_tokens > 0 and saved_tokens * parameters >= floor


def completion_logprobs(model, batch: Batch, temperature: float, *, hidden: bool = False,
                        prompt_gradient: bool = True, share_prompts: bool = True):
    """log pi(token) at the completion positions only: [N, C] (and, with ``hidden``, the last layer's hidden
    state at the positions that predict them: [N, C, H], the state a value head reads).

    Only the last C + 1 positions' logits are computed (``logits_to_keep``), and the per-token value is
    gather(logits) - logsumexp(logits), so no full-vocabulary log-softmax tensor outlives this call.

    ``prompt_gradient=False`` (the config's ``prompt_gradient``) computes the prompt's keys and values without
    gradient, once per distinct prompt, and runs only the completion region with gradient on top of them: the
    log-probs are the same (up to float rounding), the gradient leaves out what flows through the prompt's keys
    and values. A support prompt is ~600 tokens and a completion ~40, so an update costs a fraction of the time
    and memory (activations are kept for the completion only).

    With the full gradient, rows that repeat a prompt (a GRPO group's G samples) compute it once
    (``share_prompts``, `_on_shared_prompt`): the same log-probs and the same gradient, for a fraction of the
    prompt's work.
    """
    width = batch.completion_width
    shared = repeated_prompts(model, batch) if share_prompts and prompt_gradient else None
    if not prompt_gradient and batch.prompt_width > 1:
        out = _on_detached_prompt(model, batch, hidden)
    elif shared is not None:
        out = _on_shared_prompt(model, batch, hidden, *shared)
    else:
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                    logits_to_keep=width + 1, use_cache=False, output_hidden_states=hidden)
    logits = out.logits[:, :-1, :].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = batch.completion_ids.unsqueeze(-1)
    logp = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    if not hidden:
        return logp
    return logp, out.hidden_states[-1][:, -(width + 1):-1, :]


#: A prefix every prompt of a batch shares (a system prompt and the tool declarations) is computed once when it is
#: at least this long: below it the extra forward call costs more than it saves.
COMMON_PREFIX_MIN_TOKENS = 32


def common_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each prompt at least one token of its own."""
    limit = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for n in range(max(limit, 0)):
        if any(p[n] != first[n] for p in prompts[1:]):
            return n
    return max(limit, 0)


def prefix_layout(prompts: list[list[int]], prefix: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``[shared prefix | padding | the rest of the prompt]``: the prefix's columns are alike in every row, so
    its keys and values are computed once. Position ids from the mask (cumsum - 1) are the left-padded layout's."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, :prefix] = torch.tensor(p[:prefix], dtype=torch.long)
        attn[i, :prefix] = 1
        rest = p[prefix:]
        ids[i, width - len(rest):] = torch.tensor(rest, dtype=torch.long)
        attn[i, width - len(rest):] = 1
    return ids, attn


def prefix_cache(model, prefix_ids: torch.Tensor, rows: int):
    """The keys and values of one prefix, computed once without gradient and repeated to `rows` rows."""
    with torch.no_grad():
        out = model(input_ids=prefix_ids[None, :], use_cache=True, logits_to_keep=1)
    cache = out.cache
    cache.batch_select_indices(torch.zeros(rows, dtype=torch.long, device=prefix_ids.device))
    return cache


def _on_detached_prompt(model, batch: Batch, hidden: bool):
    """The forward pass of the last C + 1 positions on a gradient-free cache of the prompt before them; the part
    all prompts share is computed once."""
    cut = batch.prompt_width - 1  # the last prompt token predicts the first completion token: it runs with grad
    ids, attn = batch.input_ids, batch.attention_mask
    prompts = [row[mask > 0].tolist() for row, mask in zip(ids[:, :cut], attn[:, :cut])]
    n = len(prompts)
    if all(p == prompts[0] for p in prompts):
        shared = len(prompts[0])  # one prompt (a GRPO group): all of it is shared
    else:
        shared = common_prefix_length(prompts)
        shared = shared if shared >= COMMON_PREFIX_MIN_TOKENS else 0
    # the pad id is never attended to (mask 0), any id does
    head_ids, head_attn = prefix_layout(prompts, shared, 0) if shared else (ids[:, :cut], attn[:, :cut])
    head_ids, head_attn = head_ids.to(ids.device), head_attn.to(ids.device)
    full_attn = torch.cat([head_attn, attn[:, cut:]], dim=1)
    positions = (full_attn.cumsum(-1) - 1).clamp(min=0)
    if shared:
        cache = prefix_cache(model, head_ids[0, :shared], n)
    else:
        cache = None
    # the prompt's columns in this layout: fewer than `cut` when even the longest of these rows' prompts is shorter
    # than the batch's (rows of a batch taken apart: `update_rows`)
    head = head_ids.shape[1]
    if head > shared:
        with torch.no_grad():
            out = model(input_ids=head_ids[:, shared:], attention_mask=full_attn[:, :head],
                        position_ids=positions[:, shared:head], cache=cache, use_cache=True, logits_to_keep=1)
        cache = out.cache
    return model(input_ids=ids[:, cut:], attention_mask=full_attn, position_ids=positions[:, head:], cache=cache,
                 use_cache=True, output_hidden_states=hidden)


def repeated_prompts(model, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, int] | None:
    """(the distinct prompt heads as ``[ids | mask]`` rows, each row's index among them, the model's cache layers)
    when rows repeat a prompt, computing each once saves enough work and the model's cache is one
    `_on_shared_prompt` can stand in for; else None. The head is the prompt but its last token (which predicts the
    first completion token, so it runs with the completion)."""
    cut = batch.prompt_width - 1
    rows = batch.input_ids.shape[0]
    if cut < 1 or rows < 2:
        return None
    heads = torch.cat([batch.input_ids[:, :cut], batch.attention_mask[:, :cut]], dim=1)
    distinct, index = torch.unique(heads, dim=0, return_inverse=True)
    saved = (rows - distinct.shape[0]) * cut
    if not saves_enough(saved, sum(p.numel() for p in model.parameters()), heads.device):
        return None
    layers = _layer_count(model)
    return None if layers is None else (distinct, index, layers)


def _layer_count(model) -> int | None:
    """The model's cache layers when each is a plain growing one (full attention): the layers `_on_shared_prompt`
    stands in for; None for any other kind (sliding windows, linear attention), which it leaves alone."""
    try:
        layers = DynamicCache(config=model.config).layers
    except (AttributeError, TypeError, ValueError):  # a config transformers cannot size a cache from
        return None
    return len(layers) if layers and all(type(layer) is DynamicLayer for layer in layers) else None


class _HeadLayer(DynamicLayer):
    """A head's cache layer: keeps the keys and values first written to it, and hands each call back just its own
    (the head has no past). Under gradient checkpointing the layer runs again in backward and writes again; that
    write changes nothing, so the replay computes what the first pass did."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.keys, self.values = key_states, value_states
        return key_states, value_states


class _PrefixLayer(DynamicLayer):
    """A fixed prefix's keys and values: each call gets them with its own states appended, and nothing is kept, so
    a checkpointed layer's replay in backward reads exactly what its first pass read."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)


@contextmanager
def _cache_through_checkpoints(model):
    """Let checkpointed decoder layers keep the cache they are given (transformers drops it, as a cache that grows
    would grow again in the replay; `_HeadLayer` and `_PrefixLayer` do not). The choice is made when a layer runs,
    so its replay in backward keeps it too."""
    layers = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False)
              and hasattr(m, "_can_checkpoint_with_cache")]
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache  # the class's own value again


def _on_shared_prompt(model, batch: Batch, hidden: bool, distinct: torch.Tensor, index: torch.Tensor, layers: int):
    """The forward pass of the last C + 1 positions on a cache of each distinct prompt head, computed once (with
    gradient, if on) and repeated to the rows that share it: indexing is differentiable, so each head's gradient is
    the sum of its rows', as the full batch's would be. Works under gradient checkpointing too (the caches'
    layers give a layer's replay in backward what its first pass saw)."""
    cut = batch.prompt_width - 1
    head_ids, head_attn = distinct[:, :cut], distinct[:, cut:]
    head_cache = Cache(layers=[_HeadLayer() for _ in range(layers)])
    with _cache_through_checkpoints(model):
        model(input_ids=head_ids, attention_mask=head_attn, position_ids=(head_attn.cumsum(-1) - 1).clamp(min=0),
              cache=head_cache, use_cache=True, logits_to_keep=1)
        cache = Cache(layers=[_PrefixLayer(layer.keys[index], layer.values[index]) for layer in head_cache.layers])
        return model(input_ids=batch.input_ids[:, cut:], attention_mask=batch.attention_mask,
                     position_ids=batch.position_ids[:, cut:], cache=cache, use_cache=True,
                     output_hidden_states=hidden)
