"""`RiverBackend`: the engine's model operations on River, which hosts the model (Tinker-style).

Same interface as `LocalTorchBackend`; every River call goes through `sdk`.
River runs only its built-in losses, so an objective's loss (a torch closure over the completion log-probs) is
applied as Tinker's custom losses are: a forward pass returns the current log-probs, the loss and its gradient
g = dloss/dlogp are computed here, and a forward-backward with River's `importance_sampling` loss, advantages -g and
the just-computed log-probs as the old ones (ratio 1), gives the weights exactly the gradient sum(g * dlogp/dtheta).

Every call's token usage, as River reports it, is added up in `usage` and written to ``usage_path``: River bills
tokens, and the provider prices that file with its dated table while the watchdog polls.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import write_json

from stateset_plugins.models.batch import Batch, Generation

from . import CHECKPOINT_FILE, DEFAULT_ENDPOINT, KEY_ENV
from . import sdk as river_sdk


class RiverBackend:
    def __init__(self, tokenizer, config, *, base_model: str, run_id: str, api_key: str | None = None,
                 endpoint: str = DEFAULT_ENDPOINT, usage_path: str | Path | None = None, value_head: bool = False):
        import os

        if value_head:
            raise InputError("River runs built-in losses only: objectives with a value head (ppo, vapo) need the "
                             "local backend", field="algorithm")
        if hasattr(config, "num_generations") and float(config.temperature) != 1.0:
            # River's forward passes score at temperature 1; the loss must see the policy that sampled
            raise InputError("with the River backend, sampling objectives train at temperature 1.0",
                             field="temperature")
        self.config, self.tokenizer, self.base_model, self.run_id = config, tokenizer, base_model, run_id
        self.api_key = api_key or os.environ.get(KEY_ENV) or ""
        if not self.api_key:
            raise InputError(f"{KEY_ENV} is not set (the River backend needs River's API key)", field=KEY_ENV)
        self.vocab_size = len(tokenizer)
        eos = tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        self.usage_path = Path(usage_path) if usage_path else None
        self.usage = {"train_tokens": 0, "sample_tokens": 0}
        self.steps = 0
        self.policy_version = 0
        self._draws = 0
        self._reference = None
        self.client = river_sdk.connect(self.api_key, endpoint)
        self._context, self.session = river_sdk.open_session(self.client, run_id)
        self.model = river_sdk.create_model(self.session, base_model, int(config.lora_r), seed=int(config.seed))

    # ------------------------------------------------------------------------------------------------ usage
    def _book(self, usage: Mapping[str, int]) -> None:
        for k, v in usage.items():
            self.usage[k] = self.usage.get(k, 0) + int(v)
        if self.usage_path is not None:
            write_json(self.usage_path, {**self.usage, "updated_at": time.time()})

    # -------------------------------------------------------------------------------------------- sampling
    def _seed(self) -> int:
        self._draws += 1  # a fresh, reproducible seed per call: same run, same samples
        return int(self.config.seed) * 1_000_003 + self._draws

    def _generation(self, s: Mapping[str, Any]) -> Generation:
        ids, logps = list(s["tokens"]), list(s["logprobs"])
        end = next((k for k, t in enumerate(ids) if t in self.eos_ids), None)
        keep = len(ids) if end is None else end + 1
        return Generation(ids=ids[:keep], logps=logps[:keep], truncated=end is None)

    def generate(self, prompts, *, max_new_tokens, temperature, adapter=True):
        if adapter:
            groups, usage = river_sdk.sample(self.model, [list(p) for p in prompts], num_samples=1,
                                             max_tokens=max_new_tokens, temperature=temperature, seed=self._seed())
        else:
            groups, usage = river_sdk.sample_base(self.session, self.base_model, [list(p) for p in prompts],
                                                  max_tokens=max_new_tokens, temperature=temperature,
                                                  seed=self._seed())
        self._book(usage)
        return [self._generation(group[0]) for group in groups]

    # ------------------------------------------------------------------------------------------- training
    @staticmethod
    def _layout(batch: Batch) -> list[tuple[list[int], int, int]]:
        """Per row: the unpadded token ids, the prompt length and the completion length."""
        rows = []
        width = batch.prompt_width
        for ids, mask in zip(batch.input_ids.tolist(), batch.attention_mask.tolist()):
            p, c = sum(mask[:width]), sum(mask[width:])
            rows.append((ids[width - p:width + c], p, c))
        return rows

    def _scores(self, model, batch: Batch) -> tuple[torch.Tensor, list, list[list[float]]]:
        layout = self._layout(batch)
        data = [{"input_ids": ids} for ids, _, _ in layout]
        rows, usage = river_sdk.forward(model, data)
        self._book(usage)
        out = torch.zeros(batch.completion_mask.shape)
        for i, ((_, p, c), lp) in enumerate(zip(layout, rows)):
            # River aligns by prediction position: completion token j is predicted from position p + j - 1
            out[i, :c] = torch.tensor(lp[p - 1:p - 1 + c])
        return out, layout, rows

    def logprobs(self, batch, *, temperature, reference=False):
        if reference and self._reference is None:
            # a LoRA model that is never stepped is the base model (its B matrices stay zero): the KL reference
            self._reference = river_sdk.create_model(self.session, self.base_model, int(self.config.lora_r),
                                                     seed=int(self.config.seed))
        return self._scores(self._reference if reference else self.model, batch)[0]

    def values(self, batch):
        raise ValueError("the River backend has no value head")

    def forward_backward(self, batch, loss_fn, *, temperature, values=False, linear=False):  # the loss is remote
        if values:
            raise ValueError("the River backend has no value head")
        current, layout, rows = self._scores(self.model, batch)
        new_logp = current.clone().requires_grad_(True)
        loss, stats = loss_fn(new_logp, batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is not finite ({float(loss)})")
        loss.backward()
        grad = new_logp.grad
        data = []
        for i, ((ids, p, c), lp) in enumerate(zip(layout, rows)):
            advantages = [0.0] * len(ids)
            for j in range(c):
                advantages[p - 1 + j] = -float(grad[i, j])
            data.append({"input_ids": ids, "advantages": advantages, "old_logprobs": [float(x) for x in lp]})
        metrics, usage = river_sdk.forward_backward(self.model, data, "importance_sampling")
        self._book(usage)
        return {"loss": float(loss.detach()), **stats}

    def optimizer_step(self, *, policy=True):
        if not policy:
            raise ValueError("the River backend has no value head")
        cfg = self.config
        warmup = int(cfg.warmup_steps)
        lr = float(cfg.learning_rate) * (min(1.0, (self.steps + 1) / warmup) if warmup > 0 else 1.0)
        metrics = river_sdk.optim_step(self.model, lr, float(cfg.max_grad_norm), float(cfg.weight_decay),
                                       idempotency_key=f"{self.run_id}-step-{self.steps + 1}")
        norm = float(metrics.get("grad_norm", 0.0))
        if not math.isfinite(norm):
            raise FloatingPointError(f"gradient norm is not finite ({norm})")
        self.steps += 1
        self.policy_version += 1
        return {"grad_norm": norm, "learning_rate": lr}

    def zero_grad(self) -> None:
        """River clears gradients at the start of every forward-backward (zero_out)."""

    # ---------------------------------------------------------------------------------------- checkpoints
    def save_adapter(self, directory):
        path = river_sdk.save(self.model, f"adapter-{self.steps:06d}", mode="inference")
        river_sdk.download_checkpoint(self.api_key, path, Path(directory))
        # where River holds these weights: `chat-remote --provider river` samples them there
        write_json(Path(directory) / CHECKPOINT_FILE, {"path": path, "base_model": self.base_model,
                                                       "run_id": self.run_id})

    def load_adapter(self, directory):
        """Nothing to upload: a resumed run restores River's own training checkpoint (weights and optimizer) in
        `load_training_state`, which the run directory always loads after the adapter."""
        self.policy_version += 1

    def training_state(self):
        path = river_sdk.save(self.model, f"step-{self.steps:06d}", mode="training")
        # River's training checkpoint holds the weights and the optimizer state; the schedule is a function of
        # river_step (see optimizer_step): together the whole learner state a resume needs
        return {"river_checkpoint": path, "river_step": self.steps, "learner_state": ["optimizer", "scheduler"]}

    def load_training_state(self, state):
        if "river_checkpoint" not in state:
            raise ValueError("the checkpoint was not written by the River backend")
        river_sdk.load(self.model, state["river_checkpoint"])
        self.steps = int(state["river_step"])

    def close(self) -> None:
        """End the River session (unloads the models; billing stops). Safe to call twice."""
        if self._context is None:
            return
        context = self._context
        self._context = None
        try:
            river_sdk.close_session(context)
        finally:
            river_sdk.close(self.client)


def backend_from_spec(options: Mapping[str, Any], tokenizer, config, *, value_head: bool = False):
    """The ``river`` hosted backend (`stateset_plugins.models.hosted`) from a request's ``backend`` fields:
    ``base_model``, ``run_id``, ``endpoint``, ``usage_path``."""
    unknown = set(options) - {"base_model", "run_id", "endpoint", "usage_path"}
    if unknown:
        raise InputError(f"the river backend does not take {', '.join(sorted(unknown))}", field="backend")
    if not options.get("base_model") or not options.get("run_id"):
        raise InputError("the river backend needs base_model and run_id", field="backend")
    return RiverBackend(tokenizer, config, value_head=value_head, **dict(options))
