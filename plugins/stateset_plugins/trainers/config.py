"""Training configuration: one dataclass per objective, sharing field names and documented defaults.

A field an objective does not use is refused (``from_dict`` names it), so a typo or a DAPO-only knob passed to GRPO
never silently does nothing. The objective modules subclass `RLConfig` (or `TrainConfig` for SFT) and override only
defaults; the defaults each paper used are noted there.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import digest

ROLLOUT_ENGINES = ("transformers", "vllm")
ROLLOUT_DTYPES = ("float32", "bfloat16")  # `models.low_precision` maps them to torch dtypes


@dataclass
class TrainConfig:
    """Fields every objective uses.

    * ``steps`` (50): committed optimizer updates to run (optimizer steps, each with its own receipt; with
      ``num_iterations``/``minibatches`` one rollout batch serves several of them).
    * ``batch_size`` (4): prompts per update.
    * ``learning_rate`` (1e-4): AdamW learning rate for the LoRA weights; ``warmup_steps`` (0) linear warmup, then
      constant. ``weight_decay`` (0.0), ``max_grad_norm`` (1.0).
    * ``max_prompt_tokens`` (512): longer prompts keep their last tokens. ``max_new_tokens`` (64) and
      ``temperature`` (1.0): sampling for rollouts and for the held-out evaluation (0 means greedy).
    * ``lora_r`` (8), ``lora_alpha`` (16), ``lora_dropout`` (0.0: dropout would make the importance ratio differ
      from 1 before any update), ``lora_target_modules`` ("all-linear").
    * ``prompt_gradient`` (True): the update's gradient flows through the prompt's keys and values too. False
      computes the prompt without gradient, once per distinct prompt, and backpropagates through the completion
      only: the same log-probs and loss, a partial gradient, and on a CPU an update several times cheaper in time
      and memory when prompts are long and completions short (the quickstart's recipe uses it).
    * ``update_rows`` (0: all at once): rows an update runs forward with gradient at a time. With N > 0 the
      update first computes every row's log-probs without gradient and the loss's gradient with respect to them,
      then backpropagates N rows at a time: the same gradient (the chain rule through the log-probs; float
      rounding aside) for any loss of the log-probs, with the activations of N rows alive instead of all, for one
      more forward pass without gradient (none for a loss linear in the log-probs, SFT's: plain gradient
      accumulation). Objectives with a value head run all rows at once.
    * ``gradient_checkpointing`` (False): recompute each decoder layer in backward instead of keeping its
      activations (`models.memory`): an update's activation memory falls to about one layer's, for about one more
      forward pass of compute. Sampling keeps its KV cache. Needs ``prompt_gradient`` true.
    * ``release_freed_memory`` (False): hand freed tensors' memory back to the system at once (glibc's mmap and
      trim thresholds fixed at 64 KiB, `models.memory`), instead of glibc keeping it in its heap for reuse: the
      resident size follows the live tensors (an SFT update of SmolLM2-135M peaks at 1.2 GB instead of 3.3 GB with
      checkpointing), for a page fault per fresh allocation (about 44% slower per step there). Linux with glibc.
    * ``save_every`` (10): a checkpoint every that many committed updates, and always after the last one;
      ``keep_checkpoints`` (2) most recent ones kept. ``seed`` (0).
    * ``device`` ("auto"): where the local backend runs: "auto" (CUDA when available, else CPU), "cpu", "cuda",
      "cuda:N".
    * ``rollout_engine`` ("transformers"): what samples rollouts and evaluation replies: "transformers" (``generate``
      in the training process) or "vllm" (an offline vLLM engine with the adapter swapped in per policy version;
      needs ``pip install 'stateset-agents[vllm]'``, see docs/gpu.md). ``vllm_engine_args`` ({}): extra
      ``vllm.LLM`` arguments (``gpu_memory_utilization`` defaults to 0.5 there, leaving room for the trainer).
    * ``rollout_dtype`` ("float32"): with ``rollout_engine: transformers``, "bfloat16" samples from a bfloat16 copy
      of the weights (`models.low_precision`: the frozen weights cast once, about half the model's float32 size
      more memory; the adapter re-cast per update) while the update stays float32; a sampling objective's loss
      then takes the truncated importance correction (``tis_cap``) and reports the mismatch. Decoding on a CPU
      with AMX (and on a GPU) is several times faster in bfloat16. The training process's validation replies
      come from the same copy; ``evaluate`` and serving run the adapter at the model's own dtype.
    """

    algorithm: ClassVar[str] = ""
    steps: int = 50
    batch_size: int = 4
    learning_rate: float = 1e-4
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_prompt_tokens: int = 512
    max_new_tokens: int = 64
    temperature: float = 1.0
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: Any = "all-linear"
    prompt_gradient: bool = True
    update_rows: int = 0
    gradient_checkpointing: bool = False
    release_freed_memory: bool = False
    save_every: int = 10
    keep_checkpoints: int = 2
    seed: int = 0
    device: str = "auto"
    rollout_engine: str = "transformers"
    vllm_engine_args: dict = dataclasses.field(default_factory=dict)
    rollout_dtype: str = "float32"

    def __post_init__(self):
        positive = ("steps", "batch_size", "max_prompt_tokens", "max_new_tokens", "lora_r", "save_every",
                    "keep_checkpoints", "learning_rate")
        for name in positive:
            if not getattr(self, name) > 0:
                raise InputError(f"{name} must be positive, got {getattr(self, name)!r}", field=name)
        if self.temperature < 0:
            raise InputError("temperature must be >= 0", field="temperature")
        if not isinstance(self.update_rows, int) or self.update_rows < 0:
            raise InputError(f"update_rows must be 0 (all rows at once) or a positive row count, got "
                             f"{self.update_rows!r}", field="update_rows")
        if self.gradient_checkpointing and not self.prompt_gradient:
            raise InputError("gradient_checkpointing needs prompt_gradient true: the detached-prompt update reuses "
                             "the prompt's KV cache, which transformers' checkpointing drops (and that update keeps "
                             "activations for the completion only anyway)", field="gradient_checkpointing")
        device = str(self.device)
        if device not in ("auto", "cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
            raise InputError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}", field="device")
        if self.rollout_engine not in ROLLOUT_ENGINES:
            raise InputError(f"rollout_engine must be one of {', '.join(ROLLOUT_ENGINES)}, got "
                             f"{self.rollout_engine!r}", field="rollout_engine")
        if self.rollout_dtype not in ROLLOUT_DTYPES:
            raise InputError(f"rollout_dtype must be one of {', '.join(ROLLOUT_DTYPES)}, got {self.rollout_dtype!r}",
                             field="rollout_dtype")
        if self.rollout_dtype != "float32" and self.rollout_engine != "transformers":
            raise InputError("rollout_dtype sets the precision of transformers rollouts; vLLM takes its own "
                             "(vllm_engine_args: dtype)", field="rollout_dtype")
        if not isinstance(self.vllm_engine_args, Mapping):
            raise InputError("vllm_engine_args must be a mapping of vllm.LLM arguments", field="vllm_engine_args")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        for key in values or {}:
            if key not in known:
                raise InputError(f"the {cls.algorithm} objective does not use '{key}' "
                                 f"(its fields: {', '.join(sorted(known))})", field=key)
        return cls(**dict(values or {}))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        return digest({"algorithm": self.algorithm, **self.to_dict()})

    def kl_coefficient(self) -> float:
        """beta of the KL term against the reference; 0 (no reference log-probs needed) without one."""
        return 0.0

    def update_temperature(self) -> float:
        """The temperature the update scores log-probs at: SFT scores the data under the plain model."""
        return 1.0

    def updates_per_batch(self) -> int:
        """Optimizer steps one batch serves (sampling objectives: ``num_iterations x minibatches``)."""
        return 1

    def reuse(self) -> tuple[int, int]:
        """(passes over each batch, minibatches per pass): (1, 1) unless the objective samples its batches."""
        return 1, 1


@dataclass
class PolicyConfig(TrainConfig):
    """Fields of every sampling objective.

    * ``num_generations`` (4): completions sampled per prompt (the group G; PPO and VAPO sample G per prompt too,
      so budgets match across objectives).
    * ``beta``: KL coefficient against the reference (base model, adapter disabled).
    * ``epsilon``: lower (and, without ``epsilon_high``, upper) clipping range of the importance ratio.
    * ``num_iterations`` (1: the mu of the GRPO/PPO papers): passes over each rollout batch. Every pass scores
      the importance ratio against the behaviour log-probs recorded when the batch was sampled, so from the second
      optimizer step on the ratio leaves 1 and clipping acts. ``minibatches`` (1): each pass splits the batch's
      groups into this many contiguous minibatches, one optimizer step each. One rollout batch thus serves
      ``num_iterations x minibatches`` optimizer steps; ``steps`` and ``save_every`` count optimizer steps and must
      be multiples of it, so checkpoints (and a stop) fall on rollout-batch boundaries and resume stays exact.
      Defaults keep one update per rollout batch (PPO's paper used mu 4 to 10 with 32 minibatches, GRPO's mu 1).
    * ``tis_cap`` (2.0): with ``rollout_engine: vllm`` or ``rollout_dtype: bfloat16``, the cap C of the truncated
      importance weight min(exp(logp_trainer - logp_sampler), C) that corrects the sampler/trainer mismatch in the
      loss; null turns the correction off (the mismatch is still reported).
    """

    #: clip-higher objectives require epsilon_high >= epsilon; CISPO's lower bound is "off" (a large epsilon)
    EPSILON_HIGH_AT_LEAST_LOW: ClassVar[bool] = True
    num_generations: int = 4
    beta: float = 0.04
    epsilon: float = 0.2
    tis_cap: float | None = 2.0
    num_iterations: int = 1
    minibatches: int = 1

    def __post_init__(self):
        super().__post_init__()
        for name in ("num_iterations", "minibatches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{name} must be a positive whole number, got {value!r}", field=name)
        if self.minibatches > self.batch_size:
            raise InputError(f"minibatches {self.minibatches} exceeds batch_size {self.batch_size}: a minibatch "
                             "holds at least one prompt's group", field="minibatches")
        per = self.updates_per_batch()
        for name in ("steps", "save_every"):
            if getattr(self, name) % per:
                raise InputError(f"{name} {getattr(self, name)} is not a multiple of num_iterations x minibatches "
                                 f"= {per}: {name} counts optimizer steps, and checkpoints fall on rollout-batch "
                                 "boundaries", field=name)
        if per > 1 and (self.rollout_engine != "transformers" or self.rollout_dtype != "float32"):
            raise InputError("num_iterations/minibatches > 1 reuse a rollout batch after the weights moved; the "
                             "importance correction of another sampler (vLLM, a bfloat16 copy) needs the sampling "
                             "policy's weights: use rollout_engine transformers with rollout_dtype float32",
                             field="num_iterations")
        if self.tis_cap is not None and not self.tis_cap > 0:
            raise InputError("tis_cap must be positive (or null: no correction)", field="tis_cap")
        if self.num_generations < 2:
            raise InputError("num_generations must be at least 2 (advantages are relative to the group)",
                             field="num_generations")
        if self.beta < 0:
            raise InputError("beta must be >= 0", field="beta")
        if not self.epsilon > 0:
            raise InputError("epsilon must be positive", field="epsilon")
        if self.temperature == 0:
            raise InputError("sampling objectives need temperature > 0", field="temperature")
        high = getattr(self, "epsilon_high", None)
        if high is not None and self.EPSILON_HIGH_AT_LEAST_LOW and high < self.epsilon:
            raise InputError("epsilon_high must be >= epsilon", field="epsilon_high")
        if high is not None and not high > 0:
            raise InputError("epsilon_high must be positive", field="epsilon_high")

    def kl_coefficient(self) -> float:
        return float(self.beta)

    def updates_per_batch(self) -> int:
        return self.num_iterations * self.minibatches

    def reuse(self) -> tuple[int, int]:
        return int(self.num_iterations), int(self.minibatches)

    def update_temperature(self) -> float:
        return self.temperature  # the policy that sampled, at the temperature it sampled with


ADVANTAGE_STDS = ("population", "sample")


@dataclass
class RLConfig(PolicyConfig):
    """Group-relative objectives (advantages from the group's rewards) add:

    * ``scale_rewards`` (True): divide group-centred rewards by the group's standard deviation.
    * ``advantage_std`` ("population"): that deviation over n ("population", the GRPO paper's) or n - 1 ("sample",
      Bessel-corrected, as TRL computes it; at G = 4 its advantages are sqrt(3/4) of the population one's).
    """

    scale_rewards: bool = True
    advantage_std: str = "population"

    def __post_init__(self):
        super().__post_init__()
        if self.advantage_std not in ADVANTAGE_STDS:
            raise InputError(f"advantage_std must be one of {', '.join(ADVANTAGE_STDS)}, got {self.advantage_std!r}",
                             field="advantage_std")


@dataclass
class ValueConfig(PolicyConfig):
    """Objectives with a critic (PPO, VAPO): a value head on the policy's last hidden states.

    * ``value_learning_rate`` (1e-3): AdamW learning rate of the value head (its own optimizer: the head reads
      detached hidden states, so the value loss never moves the LoRA weights and a value-loss coefficient would
      only rescale Adam's input).
    * ``gamma`` (1.0): discount; a completion is one episode with its reward on the last token.
    * ``lam`` (PPO 0.95): GAE lambda of the policy advantages.
    """

    value_learning_rate: float = 1e-3
    gamma: float = 1.0
    lam: float = 0.95

    def __post_init__(self):
        super().__post_init__()
        if not self.value_learning_rate > 0:
            raise InputError("value_learning_rate must be positive", field="value_learning_rate")
        for name in ("gamma", "lam"):
            if not 0 <= getattr(self, name) <= 1:
                raise InputError(f"{name} must lie in [0, 1]", field=name)
