"""A stand-in for the parts of vLLM the rollout adapter calls (`LLM`, `SamplingParams`, `LoRARequest`), for CPU
tests: vLLM does not install without a GPU. `LLM.generate` samples with transformers from the base model on disk
plus the adapter at the `LoRARequest`'s path, and answers with objects shaped like vLLM's `RequestOutput`s, so the
adapter swap is checked on real weights: a stale adapter would show up as a log-prob mismatch."""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""


class SamplingParams:
    def __init__(self, **kwargs):
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
    def generate(self, prompts, params: SamplingParams, lora_request=None, use_tqdm=True):
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
