"""Batches for the objective tests: a fixed two-sample batch for hand-computed losses, the per-token terms those
hand computations use, and a real rollout of the tiny model (shared by tests/training and tests/objectives)."""
from __future__ import annotations

import math

import torch

from stateset_plugins.models.backend import LocalTorchBackend
from stateset_plugins.models.batch import Batch, Sample, collate
from stateset_plugins.models.rendering import ChatRenderer
from stateset_plugins.trainers.objectives import get_objective

#: rlaif needs a judge to configure; the rollouts here never call it.
JUDGE = {"judge_url": "http://127.0.0.1:9/v1"}


def k3(new: float, ref: float) -> float:
    """The k3 estimate of KL(new || ref) for one token, from the two log-probs."""
    return math.exp(ref - new) - (ref - new) - 1


def clip_term(r: float, a: float, lo: float, hi: float) -> float:
    """One token's clipped surrogate loss: ratio `r`, advantage `a`, clip range [1 - lo, 1 + hi]."""
    return -min(r * a, min(max(r, 1 - lo), 1 + hi) * a)


def fixed_batch(beta_ref: bool = True) -> tuple[Batch, torch.Tensor]:
    """One group of two samples, completion width 2; the second has one token. Returns (batch, new log-probs)."""
    b = Batch(input_ids=torch.zeros((2, 3), dtype=torch.long), attention_mask=torch.ones((2, 3), dtype=torch.long),
              prompt_width=1, completion_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
              behaviour_logp=torch.tensor([[-1.0, -2.0], [-0.5, math.nan]]), sample_ids=["a", "b"],
              groups=["p", "p"], group_size=2)
    b.advantages = torch.tensor([1.0, -1.0])
    b.rewards = torch.tensor([1.0, 0.0])
    b.ref_logp = torch.tensor([[-1.2, -1.9], [-0.4, 0.0]]) if beta_ref else None
    return b, torch.tensor([[-0.9, -2.1], [-0.3, 0.0]])


def rollout_batch(model, tokenizer, algo, n_prompts=2, g=4, **overrides):
    """(backend, batch, config, objective): `g` sampled completions for each of `n_prompts` prompts."""
    obj = get_objective(algo)
    values = {"num_generations": g, "max_new_tokens": 8, "temperature": 0.8, "learning_rate": 1e-3, **overrides}
    cfg = obj.Config(**({**JUDGE, **values} if algo == "rlaif" else values))
    torch.manual_seed(0)
    backend = LocalTorchBackend(model, tokenizer, cfg, value_head=obj.value_head)
    renderer = ChatRenderer(tokenizer, 64)
    prompts = [renderer.prompt_ids([{"role": "user", "content": t}], None) for t in ("hello", "my order A1 is late")]
    gens = backend.generate([p for p in prompts[:n_prompts] for _ in range(g)], max_new_tokens=8, temperature=0.8)
    samples = [Sample(f"s{i}", f"p{i // g}", prompts[i // g], x.ids, [True] * len(x.ids), x.logps)
               for i, x in enumerate(gens)]
    return backend, collate(samples, backend.pad_id, g), cfg, obj
