"""A stand-in for the parts of vLLM the rollout adapter calls (`LLM`, `SamplingParams`, `LoRARequest`), for CPU
tests: vLLM does not install without a GPU. `LLM.generate` samples with transformers from the base model on disk
plus the adapter at the `LoRARequest`'s path, and answers with objects shaped like vLLM's `RequestOutput`s, so the
adapter swap is checked on real weights: a stale adapter would show up as a log-prob mismatch.

It refuses what the pinned vLLM would: names and values are checked against `tests/fixtures/vllm/vllm_api.json`
(extracted from vLLM 0.33.0's source), so a test that drives the adapter through it also checks the adapter's
arguments against the real signatures."""
from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

API = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "vllm_api.json").read_text())


def _check_names(what: str, given, allowed) -> None:
    unknown = sorted(set(given) - set(allowed))
    if unknown:  # vLLM raises TypeError here too (unexpected keyword argument)
        raise TypeError(f"{what} got unexpected keyword arguments {unknown} (not in vLLM {API['vllm_version']})")


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""

    def __post_init__(self):  # as vLLM's
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        assert self.lora_path, "lora_path cannot be empty"


class SamplingParams:
    def __init__(self, **kwargs):
        _check_names("SamplingParams", kwargs, API["SamplingParams"])
        self.kwargs = kwargs
        for k, v in kwargs.items():
            setattr(self, k, v)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class _Engine:
    removed: list[int] = field(default_factory=list)

    def remove_lora(self, lora_id: int) -> bool:
        self.removed.append(lora_id)
        return True


class LLM:
    instances: list["LLM"] = []

    def __init__(self, **kwargs):
        from transformers import AutoModelForCausalLM

        init = API["LLM.__init__"]
        _check_names("LLM", kwargs, init["positional"] + init["keyword_only"] + API["EngineArgs"])
        if kwargs.get("logprobs_mode", "raw_logprobs") not in API["LogprobsMode"]:
            raise ValueError(f"logprobs_mode {kwargs['logprobs_mode']!r} is not one of {API['LogprobsMode']}")
        if kwargs.get("max_lora_rank", 16) not in API["MaxLoRARanks"]:
            raise ValueError(f"max_lora_rank {kwargs['max_lora_rank']} is not one of {API['MaxLoRARanks']}")
        self.kwargs = kwargs
        self.calls: list[tuple[int, LoRARequest | None, SamplingParams]] = []
        self.llm_engine = _Engine()
        self._base = AutoModelForCausalLM.from_pretrained(kwargs["model"])
        self._loaded: dict[int, object] = {}  # by lora_int_id, as vLLM caches them
        self._generator = torch.Generator().manual_seed(int(kwargs.get("seed", 0)))
        LLM.instances.append(self)

    def _model(self, lora: LoRARequest | None):
        if lora is None:
            return self._base
        if lora.lora_int_id not in self._loaded:
            from peft import PeftModel
            from transformers import AutoModelForCausalLM

            base = AutoModelForCausalLM.from_pretrained(self.kwargs["model"])
            self._loaded[lora.lora_int_id] = PeftModel.from_pretrained(base, lora.lora_path)
        return self._loaded[lora.lora_int_id]

    @torch.no_grad()
    def generate(self, prompts, sampling_params: SamplingParams | None = None, *, use_tqdm=True, lora_request=None):
        params = sampling_params
        for prompt in prompts:
            _check_names("TokensPrompt", prompt, API["TokensPrompt"])
        self.calls.append((len(prompts), lora_request, params))
        model = self._model(lora_request)
        stops = set(params.stop_token_ids)
        outputs = []
        for i, prompt in enumerate(prompts):
            ids = torch.tensor([prompt["prompt_token_ids"]])
            tokens, positions = [], []
            for _ in range(params.max_tokens):
                logits = model(input_ids=ids).logits[0, -1].float() / params.temperature
                logp = torch.log_softmax(logits, -1)  # "processed": after temperature
                tok = int(torch.multinomial(logp.exp(), 1, generator=self._generator))
                tokens.append(tok)
                positions.append({tok: Logprob(float(logp[tok]), 1, None)})
                ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)
                if tok in stops:
                    break
            finish = "stop" if tokens[-1] in stops else "length"
            done = SimpleNamespace(index=0, text="", token_ids=tokens, logprobs=positions, finish_reason=finish,
                                   cumulative_logprob=sum(p[t].logprob for p, t in zip(positions, tokens)),
                                   stop_reason=tokens[-1] if finish == "stop" else None)
            outputs.append(SimpleNamespace(request_id=str(i), prompt_token_ids=prompt["prompt_token_ids"],
                                           outputs=[done], finished=True))
        return outputs


def install(monkeypatch, version: str = "0.10.1") -> types.ModuleType:
    """Make ``import vllm`` (and ``vllm.lora.request``) find this stand-in for the rest of the test."""
    LLM.instances = []
    vllm = types.ModuleType("vllm")
    vllm.__version__ = version
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    vllm.lora, lora.request = lora, request
    for name, module in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, module)
    return vllm
