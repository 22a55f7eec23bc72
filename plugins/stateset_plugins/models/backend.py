"""The one seam for model operations: generate, token log-probs, forward-backward, optimizer step, save/load.

The engine talks only to `Backend`. `LocalTorchBackend` runs a transformers causal LM with a PEFT LoRA adapter in
this process (its ``generate`` through transformers, or through vLLM with ``rollout_engine: vllm``, see
`vllm_rollout`); a hosted backend (River, ...) implements the same methods remotely.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import torch

from .batch import Batch, Generation, IntegrityError
from .loading import peft_wrapping
from .memory import apply_gradient_checkpointing, release_freed_memory
from .scoring import (  # noqa: F401  (re-exported: the backend's callers and tests name them here)
    COMMON_PREFIX_MIN_TOKENS,
    SHARED_PREFILL_MIN_WORK,
    common_prefix_length,
    completion_logprobs,
    prefix_cache,
    prefix_layout,
    repeated_prompts,
    saves_enough,
)

LossFn = Callable[[torch.Tensor, Batch], "tuple[torch.Tensor, dict[str, float]]"]


class Backend(Protocol):
    vocab_size: int
    eos_ids: set[int]
    pad_id: int

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 adapter: bool = True) -> list[Generation]: ...

    def logprobs(self, batch: Batch, *, temperature: float, reference: bool = False) -> torch.Tensor: ...

    def values(self, batch: Batch) -> torch.Tensor: ...  # only with a value head: [N, C]

    def forward_backward(self, batch: Batch, loss_fn: LossFn, *, temperature: float, values: bool = False,
                         linear: bool = False) -> dict[str, float]: ...

    def optimizer_step(self, *, policy: bool = True) -> dict[str, float]: ...

    def save_adapter(self, directory: Path) -> None: ...

    def load_adapter(self, directory: Path) -> None: ...

    def training_state(self) -> dict[str, Any]: ...

    def load_training_state(self, state: dict[str, Any]) -> None: ...


#: Rows one `generate` call answers on a CPU (a GRPO batch fits in one; an evaluation of 40 cases takes three).
GENERATE_ROWS_CPU = 16


class _LogpRecorder:
    """A logits processor that records, per step, the sampled token's log-prob under the distribution it was drawn
    from (the scores divided by the temperature, as generate's temperature warper, the only warper allowed, does),
    without ``output_scores``: that keeps every step's [N, vocab] scores (40 answers x 256 steps x 49k vocabulary
    is 2 GB), this keeps one step's. At step t the token chosen at t - 1 is the last of ``input_ids``."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.previous: torch.Tensor | None = None
        self.logps: list[torch.Tensor] = []

    def _record(self, tokens: torch.Tensor) -> None:
        if self.previous is not None:
            scores = self.previous
            self.logps.append(scores.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scores, dim=-1))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._record(input_ids[:, -1])
        scaled = scores.float()
        self.previous = scaled / self.temperature if self.temperature != 1.0 else scaled
        return scores

    def finish(self, new: torch.Tensor) -> torch.Tensor:
        """[N, T] log-probs of the T new tokens (everything after an end token is cut away by the caller)."""
        if new.shape[1] == 0:
            return torch.empty(new.shape, dtype=torch.float32)
        self._record(new[:, -1])
        self.previous = None
        return torch.stack(self.logps[:new.shape[1]], dim=1)


def _lean_lora_forward(self, x, *args, **kwargs):
    """PEFT's LoRA ``Linear.forward`` for the one case this trainer builds (one vanilla adapter, no dropout, no
    bias, unmerged, one dtype), as the same tensor operations in the same order, so the same bits, without the
    per-call bookkeeping (argument checks, dict lookups, three nested module calls) that dominates small models.
    Anything else (extra arguments, another active adapter, a merge, an input in another dtype than the weights')
    takes PEFT's own path. The weights' dtype is read per call: a bfloat16 sampler swaps them all at once."""
    name = self._lean_adapter
    if args or kwargs or self.merged_adapters or self._active_adapter != self._lean_active:
        return type(self).forward(self, x, *args, **kwargs)
    base = self.base_layer
    a, b = self.lora_A[name].weight, self.lora_B[name].weight
    if not x.dtype == base.weight.dtype == a.dtype:  # (b's dtype is a's: the weights are swapped together)
        return type(self).forward(self, x, *args, **kwargs)
    result = torch.nn.functional.linear(x, base.weight, base.bias)
    if self._disable_adapters:
        return result
    return result + torch.nn.functional.linear(torch.nn.functional.linear(x, a), b) * self.scaling[name]


def install_lean_lora(model) -> int:
    """Route every plain LoRA linear layer of ``model`` through `_lean_lora_forward`; returns how many."""
    import types

    from peft.tuners.lora.layer import Linear as LoraLinear

    count = 0
    for module in model.modules():
        if type(module) is not LoraLinear or len(module.lora_A) != 1 or getattr(module, "fan_in_fan_out", False):
            continue
        name = next(iter(module.lora_A))
        base, a, b = module.base_layer, module.lora_A[name], module.lora_B[name]
        plain = (type(base) is torch.nn.Linear and type(a) is torch.nn.Linear and type(b) is torch.nn.Linear
                 and a.bias is None and b.bias is None and name not in module.lora_variant
                 and not module.use_dora.get(name, False)
                 and isinstance(module.lora_dropout[name], torch.nn.Identity)
                 and base.weight.dtype == a.weight.dtype == b.weight.dtype
                 and not any(m._forward_hooks or m._forward_pre_hooks for m in (module, base, a, b)))
        if not plain:
            continue
        module._lean_adapter, module._lean_active = name, module._active_adapter
        module.forward = types.MethodType(_lean_lora_forward, module)
        count += 1
    return count


def resolve_device(name: str) -> torch.device:
    """"auto": the first CUDA device when there is one, else the CPU; an explicit CUDA device must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        from stateset_agents.core.errors import InputError

        raise InputError(f"device {name!r} asked for, but torch sees no CUDA device", field="device")
    return device


@dataclass(frozen=True)
class InferenceConfig:
    """The backend's settings when it only answers (evaluation, chat): no optimizer is ever built, and a base model
    given without an adapter gets a rank-1 adapter that answers never enable (``generate(adapter=False)``)."""

    device: str = "auto"
    rollout_engine: str = "transformers"
    lora_r: int = 1
    lora_alpha: int = 1
    lora_dropout: float = 0.0
    lora_target_modules: Any = "all-linear"


def lora_config(config) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=config.lora_target_modules, task_type="CAUSAL_LM")


class LocalTorchBackend:
    """A causal LM + LoRA adapter in this process (CPU or one GPU: ``device``, else the config's, "auto" picks CUDA
    when available).

    The frozen reference is the same model with the adapter disabled, so there is one copy of the base weights.
    """

    def __init__(self, model, tokenizer, config, *, device: str | None = None, value_head: bool = False):
        from peft import PeftModel, get_peft_model

        self.config = config
        self.tokenizer = tokenizer
        self._prompt_gradient = bool(getattr(config, "prompt_gradient", True))
        use_vllm = getattr(config, "rollout_engine", "transformers") == "vllm"
        if use_vllm:
            from .vllm_rollout import import_vllm

            import_vllm()  # a missing vLLM fails here, before the caller's model is wrapped and moved
        self.device = resolve_device(device or getattr(config, "device", "auto"))
        base_path = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
        if not isinstance(model, PeftModel):
            with peft_wrapping():
                model = get_peft_model(model, lora_config(config))
        self.model = model.to(self.device)
        install_lean_lora(self.model)
        self.gradient_checkpointing = apply_gradient_checkpointing(self.model, config)
        self.releases_freed_memory = release_freed_memory(config)
        self.vocab_size = int(self.model.get_input_embeddings().weight.shape[0])
        self.eos_ids = self._eos_ids()
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.eos_ids))
        params = [p for p in self.model.parameters() if p.requires_grad]
        self._optimizer = self._scheduler = None  # built on first use: a backend that only answers needs neither
        self.model.train()  # LoRA dropout defaults to 0, so train mode samples and scores alike
        self.value_head = self.value_optimizer = None
        if value_head:
            hidden = int(self.model.get_input_embeddings().weight.shape[1])
            # zero-initialised: V = 0 at the start and no RNG draw, so sampling matches the critic-free objectives
            self.value_head = torch.nn.Linear(hidden, 1).to(self.device)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
            self.value_optimizer = torch.optim.AdamW(self.value_head.parameters(), lr=config.value_learning_rate,
                                                     weight_decay=0.0)
        self._tuner_layers: list | None = None
        self._num_params = sum(p.numel() for p in self.model.parameters())
        self._trainable = params
        self.policy_version = 0  # bumped whenever the adapter weights change (an update, a loaded adapter)
        self.rollout = None  # a sampler other than this model in its own dtype: its samples get the TIS correction
        if use_vllm:
            from .vllm_rollout import VLLMRollout

            self.rollout = VLLMRollout(base_path, getattr(tokenizer, "name_or_path", "") or base_path, config,
                                       self.eos_ids, self.save_adapter)
        else:
            from .low_precision import ROLLOUT_DTYPES, LowPrecisionRollout

            dtype = ROLLOUT_DTYPES[getattr(config, "rollout_dtype", "float32")]
            if dtype is not None and any(p.dtype != dtype for p in self.model.parameters()):
                self.rollout = LowPrecisionRollout(self.model, dtype, self._generate_here)

    def _build_optimizer(self) -> None:
        if self._optimizer is None:
            config = self.config
            if isinstance(config, InferenceConfig):
                raise TypeError("this backend only answers (InferenceConfig): it has no optimizer; build it with a "
                                "training config to update the adapter")
            self._optimizer = torch.optim.AdamW(self._trainable, lr=config.learning_rate,
                                                weight_decay=config.weight_decay)
            warmup = config.warmup_steps
            self._scheduler = torch.optim.lr_scheduler.LambdaLR(
                self._optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0)

    @property
    def optimizer(self):
        """AdamW over the adapter's weights, from the config's learning_rate and weight_decay."""
        self._build_optimizer()
        return self._optimizer

    @property
    def scheduler(self):
        """The optimizer's warmup schedule (linear over the config's warmup_steps, then constant)."""
        self._build_optimizer()
        return self._scheduler

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if source is None:
                continue
            ids.update(source if isinstance(source, (list, tuple)) else [source])
        if not ids:
            raise ValueError("the tokenizer defines no end-of-sequence token")
        return {int(i) for i in ids}

    def _lora_layers(self) -> list | None:
        """The adapter layers whose flag turns LoRA off, found once; None when PEFT's own context must do it (a
        wrapper with its own copy of a module, a merged layer, an adapter type other than LoRA)."""
        if self._tuner_layers is None:
            from peft.tuners.lora import LoraLayer
            from peft.tuners.tuners_utils import BaseTunerLayer
            from peft.utils.other import AuxiliaryTrainingWrapper

            layers, plain = [], True
            for module in self.model.modules():
                if isinstance(module, BaseTunerLayer):
                    layers.append(module)
                    plain = plain and isinstance(module, LoraLayer) and hasattr(module, "_disable_adapters") \
                        and not module.merged
                elif isinstance(module, AuxiliaryTrainingWrapper):
                    plain = False
            plain = plain and bool(layers) and not self.model.peft_config[self.model.active_adapter].is_prompt_learning
            self._tuner_layers = layers if plain else []
        return self._tuner_layers or None

    @contextlib.contextmanager
    def _adapter(self, enabled: bool) -> Iterator[None]:
        """The adapter on (a no-op) or off: the base model, i.e. the frozen reference. Off is only ever used without
        gradients, so flipping each LoRA layer's ``disable_adapters`` flag is all PEFT's ``disable_adapter`` does
        that matters here (it also walks every module twice, builds a model status report and toggles
        ``requires_grad``), at a fraction of the cost."""
        if enabled:
            yield
            return
        layers = None if torch.is_grad_enabled() else self._lora_layers()
        if layers is None:
            with self.model.disable_adapter():
                yield
            return
        before = [layer._disable_adapters for layer in layers]
        try:
            for layer in layers:
                layer._disable_adapters = True
            yield
        finally:
            for layer, flag in zip(layers, before):
                layer._disable_adapters = flag

    def generate(self, prompts, *, max_new_tokens, temperature, adapter=True):
        if self.rollout is not None:
            return self.rollout.generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                                         adapter=adapter, version=self.policy_version)
        return self._generate_here(prompts, max_new_tokens=max_new_tokens, temperature=temperature, adapter=adapter)

    def _generate_here(self, prompts, *, max_new_tokens, temperature, adapter=True):
        """transformers ``generate`` on this process's model, as its weights are (a low-precision rollout swaps
        them around this call)."""
        # inference mode: nothing sampled here is ever differentiated (the update recomputes what it needs); on a
        # CPU, at most GENERATE_ROWS_CPU rows at a time: the KV cache of 40 support prompts is over a GB
        rows = GENERATE_ROWS_CPU if self.device.type == "cpu" else len(prompts)
        chunks = []
        with torch.inference_mode(), self._adapter(adapter):
            for start in range(0, len(prompts), rows):
                chunks.append(self._sample(prompts[start:start + rows], max_new_tokens=max_new_tokens,
                                           temperature=temperature))
        result = []
        pairs = [(row, lp) for new, logps in chunks for row, lp in zip(new.tolist(), logps.tolist())]
        for row, lp in pairs:
            end = next((k for k, tok in enumerate(row) if tok in self.eos_ids), None)
            keep = len(row) if end is None else end + 1
            result.append(Generation(ids=row[:keep], logps=lp[:keep], truncated=end is None))
        return result

    def _sample(self, prompts, *, max_new_tokens, temperature) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers ``generate`` on the left-padded prompts: the new token ids [N, T] and, for each, the
        log-prob under the scores it was sampled from (after temperature) [N, T], on the CPU."""
        width = max(len(p) for p in prompts)
        shared = common_prefix_length(prompts) if len(prompts) > 1 and len(set(map(tuple, prompts))) > 1 else 0
        if shared >= COMMON_PREFIX_MIN_TOKENS:
            ids, attn = prefix_layout(prompts, shared, self.pad_id)
        else:
            shared = 0
            ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for i, p in enumerate(prompts):
                ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
                attn[i, width - len(p):] = 1
        sampling = temperature > 0
        recorder = _LogpRecorder(temperature if sampling else 1.0)
        kwargs: dict[str, Any] = {"do_sample": sampling, "max_new_tokens": max_new_tokens,
                                  "logits_processor": [recorder], "return_dict_in_generate": True,
                                  "pad_token_id": self.pad_id, "eos_token_id": sorted(self.eos_ids),
                                  # only temperature may shape the distribution, or the recorded log-probs would
                                  # belong to a truncated policy the loss never computes
                                  "top_k": 0, "top_p": 1.0, "min_p": None, "repetition_penalty": 1.0}
        if sampling:
            kwargs["temperature"] = temperature
        ids, attn = ids.to(self.device), attn.to(self.device)
        # a prefix all prompts share (system prompt, tool declarations) is computed once; else identical prompts
        # (a GRPO group) share one prefill
        cache = prefix_cache(self.model, ids[0, :shared], len(prompts)) if shared else \
            self._shared_prefill(prompts, ids, attn)
        if cache is not None:
            kwargs["cache"] = cache
        out = self.model.generate(input_ids=ids, attention_mask=attn, **kwargs)
        new = out.sequences[:, width:]
        return new.cpu(), recorder.finish(new).cpu()

    def _shared_prefill(self, prompts, ids: torch.Tensor, attn: torch.Tensor):
        """A KV cache of every prompt but its last token, computed once per distinct prompt and repeated to the
        rows that share it (a GRPO group's G samples), for ``generate`` to continue from; None when it would not
        pay (no repeated prompt, or too little compute saved to cover the extra forward call).

        Only the prompt is cached: ``generate`` still runs the last prompt token itself, so the scores the first
        token is sampled from (and its recorded log-prob) come from ``generate`` as before."""
        width = ids.shape[1]
        first: dict[tuple[int, ...], int] = {}
        rows = [first.setdefault(tuple(p), i) for i, p in enumerate(prompts)]
        saved = (len(prompts) - len(first)) * (width - 1)
        if width < 2 or not saves_enough(saved, self._num_params, ids.device):
            return None
        uniq = sorted(first.values())
        where = {r: k for k, r in enumerate(uniq)}
        pick = torch.tensor(uniq, device=ids.device)
        u_ids, u_attn = ids[pick, :-1], attn[pick, :-1]
        position_ids = (u_attn.cumsum(-1) - 1).clamp(min=0)  # generate's rule (pads at 0)
        out = self.model(input_ids=u_ids, attention_mask=u_attn, position_ids=position_ids, use_cache=True,
                         logits_to_keep=1)
        cache = out.cache
        cache.batch_select_indices(torch.tensor([where[r] for r in rows], device=ids.device))
        return cache

    def _to_device(self, batch: Batch) -> Batch:
        if self.device.type == "cpu":
            return batch
        import dataclasses

        moved = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        for k, v in moved.items():
            if isinstance(v, torch.Tensor):
                moved[k] = v.to(self.device)
        return Batch(**moved)

    @torch.no_grad()
    def logprobs(self, batch, *, temperature, reference=False):
        with self._adapter(not reference):
            return completion_logprobs(self.model, self._to_device(batch), temperature,
                                       prompt_gradient=self._prompt_gradient).cpu()

    def _values(self, hidden: torch.Tensor) -> torch.Tensor:
        # detached: the critic learns on the policy's features without pulling them toward itself
        return self.value_head(hidden.detach().float()).squeeze(-1)

    @torch.no_grad()
    def values(self, batch):
        if self.value_head is None:
            raise ValueError("this backend has no value head (construct it with value_head=True)")
        _, hidden = completion_logprobs(self.model, self._to_device(batch), 1.0, hidden=True,
                                        prompt_gradient=self._prompt_gradient)
        return self._values(hidden).cpu()

    def forward_backward(self, batch, loss_fn, *, temperature, values=False, linear=False):
        """Backpropagate `loss_fn` of the batch's log-probs. ``linear``: the loss is linear in them (its gradient
        with respect to them does not depend on them, as SFT's likelihood), which spares `update_rows` a pass."""
        batch = self._to_device(batch)
        chunk = int(getattr(self.config, "update_rows", 0) or 0)
        if not values and 0 < chunk < len(batch.sample_ids):
            if linear:
                return self._forward_backward_linear_in_chunks(batch, loss_fn, temperature, chunk)
            return self._forward_backward_in_chunks(batch, loss_fn, temperature, chunk)
        hidden = None
        if values:
            new_logp, hidden = completion_logprobs(self.model, batch, temperature, hidden=True,
                                                   prompt_gradient=self._prompt_gradient)
        else:
            new_logp = completion_logprobs(self.model, batch, temperature, prompt_gradient=self._prompt_gradient)
        loss, stats = self._loss(new_logp, batch, loss_fn, self._values(hidden) if values else None)
        loss.backward()
        return {"loss": float(loss.detach()), **stats}

    def _loss(self, new_logp, batch, loss_fn, values=None):
        """The objective's loss on these log-probs (importance-corrected when another sampler drew them), checked
        finite; its stats carry the correction's."""
        mismatch: dict[str, float] = {}
        if self.rollout is not None and hasattr(self.config, "tis_cap"):  # a sampling objective's rollouts
            batch, mismatch = self._importance_correction(new_logp, batch)
        loss, stats = loss_fn(new_logp, batch) if values is None else loss_fn(new_logp, batch, values)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is not finite ({float(loss)})")
        return loss, {**stats, **mismatch}

    def _chunk_logprobs(self, batch, temperature, chunk):
        """(rows a..b, a function computing those rows' log-probs) for the chunks of `chunk` rows."""
        rows = len(batch.sample_ids)
        spans = [(start, min(start + chunk, rows)) for start in range(0, rows, chunk)]

        def logprobs(a: int, b: int) -> torch.Tensor:
            return completion_logprobs(self.model, batch.rows(a, b), temperature, prompt_gradient=self._prompt_gradient)
        return spans, logprobs

    def _forward_backward_linear_in_chunks(self, batch, loss_fn, temperature, chunk):
        """`update_rows` for a loss linear in the log-probs: dL/d(log-probs) is the same wherever it is taken, so
        it is taken at zero, and each chunk's one forward pass with gradient serves both the backward and the
        loss (computed afterwards from the chunks' log-probs, as the whole batch's would be): plain gradient
        accumulation, with no pass more than an update of all rows at once."""
        spans, logprobs = self._chunk_logprobs(batch, temperature, chunk)
        at = torch.zeros(tuple(batch.completion_mask.shape), dtype=torch.float32, requires_grad=True)
        (grad,) = torch.autograd.grad(loss_fn(at, batch)[0], at)
        parts = []
        for a, b in spans:
            logp = logprobs(a, b)
            logp.backward(grad[a:b].to(device=logp.device, dtype=logp.dtype))
            parts.append(logp.detach())
        try:
            with torch.no_grad():
                loss, stats = self._loss(torch.cat(parts), batch, loss_fn)
        except FloatingPointError:
            self.zero_grad()  # the gradient of a loss that is not finite must not reach a step
            raise
        return {"loss": float(loss), **stats}

    def _forward_backward_in_chunks(self, batch, loss_fn, temperature, chunk):
        """`forward_backward` with the activations of `chunk` rows alive at a time (``update_rows``): the loss and
        dL/d(log-probs) from log-probs computed without gradient, then each chunk's log-probs recomputed with
        gradient and backpropagated with its slice of dL/d(log-probs). The loss is any function of the log-probs
        and the batch, so the chain rule through them gives the whole batch's gradient."""
        spans, logprobs = self._chunk_logprobs(batch, temperature, chunk)
        with torch.no_grad():
            logp = torch.cat([logprobs(a, b) for a, b in spans])
        logp.requires_grad_(True)
        loss, stats = self._loss(logp, batch, loss_fn)
        (grad,) = torch.autograd.grad(loss, logp)
        for a, b in spans:
            logprobs(a, b).backward(grad[a:b])
        return {"loss": float(loss.detach()), **stats}

    def _importance_correction(self, new_logp, batch):
        from .importance import apply_tis

        if self.rollout.sampled_version != self.policy_version:
            # the live log-probs stand for the sampling policy's only while the weights are the ones that sampled
            raise IntegrityError("batch", f"sampled by policy version {self.rollout.sampled_version}, trained at "
                                          f"{self.policy_version}: the importance correction needs the trainer's "
                                          "log-probs of the sampling policy")
        return apply_tis(new_logp, batch, self.config.tis_cap, self.rollout.name)

    def optimizer_step(self, *, policy=True):
        """One step of the LoRA optimizer (and the value head's, if any); ``policy=False`` steps only the value
        head (value pre-training), leaving the LoRA weights, their optimizer and the schedule untouched."""
        stats: dict[str, float] = {}
        if self.value_head is not None:
            vnorm = torch.nn.utils.clip_grad_norm_(list(self.value_head.parameters()), self.config.max_grad_norm)
            if not math.isfinite(float(vnorm)):
                self.zero_grad()
                raise FloatingPointError(f"value gradient norm is not finite ({float(vnorm)})")
            self.value_optimizer.step()
            self.value_optimizer.zero_grad(set_to_none=True)
            stats["value_grad_norm"] = float(vnorm)
        if not policy:
            self.optimizer.zero_grad(set_to_none=True)
            return stats
        norm = torch.nn.utils.clip_grad_norm_(self._trainable, self.config.max_grad_norm)
        if not math.isfinite(float(norm)):
            self.zero_grad()
            raise FloatingPointError(f"gradient norm is not finite ({float(norm)})")
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.policy_version += 1
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": float(norm), "learning_rate": float(lr), **stats}

    def trainable_parameters(self) -> list[torch.Tensor]:
        """What an update changes (the LoRA weights, and a value head's): the ranks of a run sum these gradients."""
        return list(self._trainable) + (list(self.value_head.parameters()) if self.value_head is not None else [])

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        if self.value_optimizer is not None:
            self.value_optimizer.zero_grad(set_to_none=True)

    def save_adapter(self, directory):
        self.model.save_pretrained(str(directory), safe_serialization=True)

    def load_adapter(self, directory):
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(str(Path(directory) / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(self.model, weights)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"adapter in {directory} does not fit this model: unexpected {unexpected[:3]}")
        self.policy_version += 1

    def update_digest(self) -> dict[str, str]:
        """The trainable weights' digests (`plugin_api.checkpoints.tensors_digest`): "adapter" over the tensors
        `save_adapter` writes, with their saved names, so it equals the saved file's `safetensors_digest`, and
        "value_head" when there is one. Taken after each update for its receipt; a LoRA adapter hashes in
        milliseconds."""
        from peft import get_peft_model_state_dict

        from stateset_agents.plugin_api.checkpoints import tensors_digest

        from .digests import entries

        out = {"adapter": tensors_digest(entries(get_peft_model_state_dict(self.model)))}
        if self.value_head is not None:
            out["value_head"] = tensors_digest(entries(self.value_head.state_dict()))
        return out

    def training_state(self):
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        if self.value_head is not None:
            state["value_head"] = self.value_head.state_dict()
            state["value_optimizer"] = self.value_optimizer.state_dict()
        return state

    def load_training_state(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.value_head is not None:
            if "value_head" not in state:
                raise ValueError("the checkpoint holds no value head, but this objective trains one")
            self.value_head.load_state_dict(state["value_head"])
            self.value_optimizer.load_state_dict(state["value_optimizer"])
