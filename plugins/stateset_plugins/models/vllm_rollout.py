"""Rollouts through an offline vLLM engine, behind the backend's ``generate``; the truncated importance correction.

vLLM samples from the same base weights (loaded by vLLM from disk) with the trainer's LoRA adapter, saved and
swapped in once per policy version as a `LoRARequest` with a new int id and path (vLLM caches adapters by id, so
new weights need a new id; no restart). The behaviour log-probs are vLLM's own, after temperature
(``logprobs_mode="processed_logprobs"``, vLLM >= 0.10; older versions return raw log-probs and are refused).

vLLM's kernels differ from the trainer's, so its log-probs of the same policy differ a little. The loss therefore
uses the trainer's log-probs of the sampling policy as the ratio's denominator and weights each sampled token by
the truncated importance weight min(exp(logp_trainer - logp_vllm), C) (TIS); the mismatch is reported.

`to_generations` reads real vLLM ``RequestOutput`` objects or recorded JSON with the same fields (duck typing): the
CPU tests use recordings, since vLLM does not install without a GPU.

Every vLLM name used here (``LLM`` and engine arguments, ``SamplingParams`` fields, ``LoRARequest``,
``LLM.generate``'s keywords, ``llm_engine.remove_lora``, the ``RequestOutput`` / ``CompletionOutput`` / ``Logprob``
attributes, the finish reasons) was checked against the source of vLLM 0.33.0, the version the trainer image pins:
``tests/fixtures/vllm/vllm_api.json`` holds them as extracted from that wheel, and ``tests/gpu/test_vllm_api.py``
fails when the adapter, the stand-in or the recorded fixtures use a name that source lacks. Checked, not run: no
test here runs a real vLLM engine.
"""
from __future__ import annotations

import importlib
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from stateset_agents.core.errors import ComponentUnavailable

from .batch import Generation, IntegrityError

INSTALL = "pip install 'stateset-agents[vllm]'"
MIN_VERSION = (0, 10)  # the first release with logprobs_mode="processed_logprobs"; names checked against 0.33.0
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # max_lora_rank values vLLM 0.33 accepts (MaxLoRARanks)
_MISSING = object()


def import_vllm():
    """The vllm module, or a clear error saying how to install it (imported only when rollout_engine is vllm)."""
    try:
        vllm = importlib.import_module("vllm")
        importlib.import_module("vllm.lora.request")
    except ImportError as exc:
        raise ComponentUnavailable("rollout_engine 'vllm'", [f"vllm ({exc})"], INSTALL) from None
    version = _version_tuple(getattr(vllm, "__version__", "0"))
    if version < MIN_VERSION:
        raise ComponentUnavailable(
            "rollout_engine 'vllm'", [f"vllm >= {'.'.join(map(str, MIN_VERSION))} (found {vllm.__version__}: it "
                                      "returns log-probs before temperature, not the sampling policy's)"], INSTALL)
    return vllm


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in str(text).split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


# ------------------------------------------------------------------------------------------ output conversion
def _field(obj: Any, name: str, default: Any = _MISSING) -> Any:
    if isinstance(obj, Mapping):
        value = obj.get(name, default)
    else:
        value = getattr(obj, name, default)
    if value is _MISSING:
        raise KeyError(name)
    return value


def _sampled_logprob(position: Any, token: int) -> float | None:
    """The log-prob recorded for ``token`` at one position ({token_id: Logprob}; JSON keys are strings)."""
    if position is None:
        return None
    hit = position.get(token)
    if hit is None:
        hit = position.get(str(token))
    if hit is None:
        return None
    value = hit if isinstance(hit, (int, float)) else _field(hit, "logprob", None)
    return None if value is None else float(value)


def to_generations(outputs: Iterable[Any], eos_ids: set[int], max_new_tokens: int):
    """vLLM ``RequestOutput``s (or their recordings) -> the engine's `Generation`s, in request order, one per
    ``CompletionOutput``. Anything that does not add up is an `IntegrityError`; a log-prob is never invented."""
    result = []
    for k, request in enumerate(outputs):
        where = f"vllm request #{k}"
        try:
            where = f"vllm request {_field(request, 'request_id')}"
            for j, completion in enumerate(_field(request, "outputs")):
                ids, logps, truncated = _completion(completion, f"{where} output {j}", eos_ids, max_new_tokens)
                result.append(Generation(ids=ids, logps=logps, truncated=truncated))
        except (KeyError, TypeError, ValueError) as exc:  # a record of another shape: refuse it, never guess
            raise IntegrityError(where, f"not a vLLM RequestOutput ({type(exc).__name__}: {exc})") from None
    return result


def _completion(c: Any, where: str, eos_ids: set[int], max_new_tokens: int) -> tuple[list[int], list[float], bool]:
    ids = [int(t) for t in _field(c, "token_ids")]
    if not ids or len(ids) > max_new_tokens:
        raise IntegrityError(where, f"{len(ids)} sampled tokens, expected 1 to {max_new_tokens}")
    positions = _field(c, "logprobs", None)
    if positions is None:
        raise IntegrityError(where, "no log-probs (SamplingParams(logprobs=...) unset); behaviour log-probs are "
                                    "recorded at sampling time, never invented")
    if len(positions) != len(ids):
        raise IntegrityError(where, f"{len(positions)} log-prob positions for {len(ids)} tokens")
    logps = []
    for t, token in enumerate(ids):
        value = _sampled_logprob(positions[t], token)
        if value is None:
            raise IntegrityError(where, f"no log-prob for the sampled token {token} at position {t} (behaviour "
                                        "log-probs are recorded at sampling time, never invented)")
        if not math.isfinite(value) or value > 1e-4:
            raise IntegrityError(where, f"log-prob {value} of the sampled token {token} at position {t} is not a "
                                        "finite non-positive number")
        logps.append(value)
    finish = _field(c, "finish_reason", None)
    ends = [t for t, token in enumerate(ids) if token in eos_ids]
    if finish == "stop":
        if ends != [len(ids) - 1]:  # only end-of-sequence ids stop (no stop strings): the last token is one
            raise IntegrityError(where, f"finished 'stop' but end-of-sequence tokens sit at {ends} of {len(ids)}")
        truncated = False
    elif finish == "length":
        if ends:
            raise IntegrityError(where, f"finished 'length' with an end-of-sequence token at {ends[0]}")
        truncated = True
    else:
        raise IntegrityError(where, f"unfinished request (finish_reason {finish!r})")
    total = _field(c, "cumulative_logprob", None)
    if total is not None and abs(float(total) - sum(logps)) > 1e-3 * len(logps) + 1e-4:
        raise IntegrityError(where, f"cumulative_logprob {total} disagrees with the per-token sum {sum(logps)}")
    return ids, logps, truncated


# ------------------------------------------------------------------------------------------------ adapters
class AdapterVersions:
    """One `LoRARequest` per policy version: a version's adapter is saved once, under its own path, and gets the
    int id version + 1 (vLLM wants ids > 0); the previous version's files are removed after the switch."""

    def __init__(self, root: Path, save: Callable[[Path], None], make_request: Callable[..., Any]):
        self.root, self.save, self.make_request = Path(root), save, make_request
        self.version: int | None = None
        self.current: Any = None

    def request(self, version: int) -> tuple[Any, Any]:
        """(the request for ``version``, the request it replaced or None)."""
        if version == self.version:
            return self.current, None
        if self.version is not None and version < self.version:
            raise ValueError(f"policy version went back from {self.version} to {version}")
        path = self.root / f"policy-v{version}"
        self.save(path)
        retired, self.version = self.current, version
        self.current = self.make_request(lora_name=f"policy-v{version}", lora_int_id=version + 1,
                                         lora_path=str(path))
        if retired is not None:
            shutil.rmtree(_field(retired, "lora_path"), ignore_errors=True)
        return self.current, retired


class VLLMRollout:
    """``generate`` through ``vllm.LLM`` (built on first use) with the adapter of the current policy version."""

    def __init__(self, model_path: str, tokenizer_path: str, config, eos_ids: set[int],
                 save_adapter: Callable[[Path], None], workdir: Path | None = None):
        self.vllm = import_vllm()
        if not model_path:
            raise ValueError("rollout_engine 'vllm' loads the base model itself: the model needs a name_or_path "
                             "(a local directory or hub id holding the same weights)")
        self.model_path, self.tokenizer_path, self.config = model_path, tokenizer_path or model_path, config
        self.eos_ids = set(eos_ids)
        request_cls = importlib.import_module("vllm.lora.request").LoRARequest
        root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="stateset-vllm-adapters-"))
        self.adapters = AdapterVersions(root, save_adapter, request_cls)
        self.sampled_version: int | None = None  # the policy version of the last adapter rollout
        self.name = "vllm"  # the mismatch stats are named after it
        self._llm = None
        self.engine_args()  # an unservable configuration (a LoRA rank vLLM lacks) is refused now, not mid-run

    def engine_args(self) -> dict[str, Any]:
        cfg = self.config
        rank = next((r for r in LORA_RANKS if r >= cfg.lora_r), None)
        if rank is None:
            raise ValueError(f"rollout_engine 'vllm' serves LoRA ranks up to {LORA_RANKS[-1]}; lora_r is {cfg.lora_r}")
        args = {"gpu_memory_utilization": 0.5, "seed": cfg.seed, "dtype": "auto", **dict(cfg.vllm_engine_args)}
        # what the behaviour log-probs and the adapter swap rely on; not overridable
        args.update(model=self.model_path, tokenizer=self.tokenizer_path, enable_lora=True, max_loras=1,
                    max_lora_rank=rank, logprobs_mode="processed_logprobs")
        return args

    @property
    def llm(self):
        if self._llm is None:
            self._llm = self.vllm.LLM(**self.engine_args())
        return self._llm

    def sampling_params(self, max_new_tokens: int, temperature: float):
        # only temperature shapes the distribution (as in the transformers path): the recorded log-probs must be
        # the policy the loss computes. logprobs=1: the sampled token's entry is always returned with it.
        return self.vllm.SamplingParams(n=1, temperature=temperature, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                                        presence_penalty=0.0, frequency_penalty=0.0, max_tokens=max_new_tokens,
                                        logprobs=1, stop_token_ids=sorted(self.eos_ids), ignore_eos=False)

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float,
                 adapter: bool, version: int):
        lora = None
        if adapter:
            lora, retired = self.adapters.request(version)
            remove = getattr(getattr(self.llm, "llm_engine", None), "remove_lora", None)
            if retired is not None and remove is not None:
                remove(_field(retired, "lora_int_id"))
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts],
                                    self.sampling_params(max_new_tokens, temperature), lora_request=lora,
                                    use_tqdm=False)
        gens = to_generations(outputs, self.eos_ids, max_new_tokens)
        if len(gens) != len(prompts):
            raise IntegrityError("vllm", f"{len(gens)} completions for {len(prompts)} prompts")
        if adapter:
            self.sampled_version = version
        return gens
