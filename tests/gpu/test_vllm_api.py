"""The vLLM names the rollout adapter uses, pinned to vLLM's own source.

`tests/fixtures/vllm/vllm_api.json` was extracted from the vLLM 0.33.0 wheel (the version Dockerfile.gpu pins) by
`tests/fixtures/vllm/extract_api.py`, which parses the wheel's source with `ast` and installs nothing. These tests
drive the adapter (with recording stand-ins, no model) and check every keyword it passes and every attribute it
reads against that source; the stand-in `fake_vllm` and the recorded fixtures are checked the same way. A new pin
means: download the wheel, rerun the extractor, and let these tests say what moved. Checked, not run: no vLLM engine
runs here.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from stateset_plugins.models import vllm_rollout
from stateset_plugins.models.vllm_rollout import LORA_RANKS, AdapterVersions, VLLMRollout, to_generations

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vllm"
API = json.loads((FIXTURES / "vllm_api.json").read_text())
INIT = API["LLM.__init__"]
ENGINE_ARGS = set(INIT["positional"] + INIT["keyword_only"] + API["EngineArgs"])  # LLM(**kw) -> EngineArgs
REQUEST_OUTPUT = set(API["RequestOutput.__init__"]["positional"] + API["RequestOutput.__init__"]["keyword_only"])


def test_the_extracted_api_is_the_pinned_vllm():
    assert API["vllm_version"] == "0.33.0" and API["wheel"].startswith("vllm-0.33.0-")
    dockerfile = (ROOT / "Dockerfile.gpu").read_text()
    assert re.search(r'ARG VLLM="vllm==0\.33\.\*"', dockerfile)
    assert 'ARG TORCH="torch==2.14.0"' in dockerfile
    assert 'ARG TRANSFORMERS="transformers>=5.16.1,<5.21"' in dockerfile
    # what the wheel itself requires (the GPU stack's pins, trainer_stack(cpu=False), are checked in
    # tests/containers/test_container_unit.py, which needs no torch)
    assert API["requires"] == ["torch==2.14.0", "transformers<5.21.0,>=5.16.1"]


class _Recorder:
    """Stands for a vLLM class: records the keywords it is called with."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return SimpleNamespace(**kwargs)


def _rollout(monkeypatch, tmp_path, lora_r=8, engine_args=None):
    sampling, lora = _Recorder(), _Recorder()
    fake = SimpleNamespace(__version__="0.33.0", SamplingParams=sampling, LLM=_Recorder())
    monkeypatch.setattr(vllm_rollout, "import_vllm", lambda: fake)
    request_module = SimpleNamespace(LoRARequest=lora)
    real_import = vllm_rollout.importlib.import_module
    monkeypatch.setattr(vllm_rollout.importlib, "import_module",
                        lambda name: request_module if name == "vllm.lora.request" else real_import(name))
    cfg = SimpleNamespace(lora_r=lora_r, seed=3, vllm_engine_args=engine_args or {})

    def save(path):
        path.mkdir(parents=True)

    rollout = VLLMRollout("/models/base", "", cfg, {2}, save, workdir=tmp_path)
    return rollout, sampling, lora


def test_engine_arguments_are_vllm_llm_arguments_with_valid_values(monkeypatch, tmp_path):
    rollout, _, _ = _rollout(monkeypatch, tmp_path, engine_args={"enforce_eager": True, "max_model_len": 2048})
    args = rollout.engine_args()
    assert set(args) <= ENGINE_ARGS, sorted(set(args) - ENGINE_ARGS)
    assert INIT["positional"] == ["model"] and "model" in args
    assert args["logprobs_mode"] == "processed_logprobs" and args["logprobs_mode"] in API["LogprobsMode"]
    assert args["enable_lora"] is True and args["max_loras"] == 1
    assert args["max_lora_rank"] in API["MaxLoRARanks"]


def test_lora_ranks_are_vllms_and_an_unservable_rank_is_refused_up_front(monkeypatch, tmp_path):
    assert list(LORA_RANKS) == API["MaxLoRARanks"]
    for r, served in [(1, 1), (4, 8), (8, 8), (300, 320), (512, 512)]:
        rollout, _, _ = _rollout(monkeypatch, tmp_path / str(r), lora_r=r)
        assert rollout.engine_args()["max_lora_rank"] == served
    with pytest.raises(ValueError, match="LoRA ranks up to 512; lora_r is 600"):
        _rollout(monkeypatch, tmp_path / "600", lora_r=600)


def test_sampling_params_are_vllm_sampling_params_fields(monkeypatch, tmp_path):
    rollout, sampling, _ = _rollout(monkeypatch, tmp_path)
    rollout.sampling_params(16, 0.7)
    ((args, kwargs),) = sampling.calls
    assert not args and set(kwargs) <= set(API["SamplingParams"]), sorted(set(kwargs) - set(API["SamplingParams"]))
    assert kwargs["logprobs"] == 1 and kwargs["stop_token_ids"] == [2]


def test_lora_requests_use_vllms_fields_and_valid_ids(tmp_path):
    made = []

    def make(**kwargs):
        made.append(kwargs)
        return SimpleNamespace(**kwargs)

    versions = AdapterVersions(tmp_path, lambda p: p.mkdir(parents=True), make)
    versions.request(0)
    versions.request(1)
    fields = API["LoRARequest"]
    for kwargs in made:
        assert set(kwargs) <= set(fields) and fields[:2] == ["lora_name", "lora_int_id"]
        assert kwargs["lora_int_id"] >= 1 and kwargs["lora_path"]  # vLLM's __post_init__ refuses otherwise


def test_generate_uses_vllms_keywords_prompts_and_engine_methods(monkeypatch, tmp_path):
    rollout, _, _ = _rollout(monkeypatch, tmp_path)
    doc = json.loads((FIXTURES / "request_outputs.json").read_text())
    seen = {}

    class Engine:
        def remove_lora(self, lora_id):
            seen["removed"] = lora_id

    class LLM:
        llm_engine = Engine()

        def generate(self, prompts, *args, **kwargs):
            seen.update(prompts=prompts, args=args, kwargs=kwargs)
            return doc["request_outputs"][:len(prompts)]

    rollout._llm = LLM()
    rollout.generate([[1, 5, 9], [3, 4]], max_new_tokens=5, temperature=1.0, adapter=True, version=0)
    rollout.generate([[1, 5, 9], [3, 4]], max_new_tokens=5, temperature=1.0, adapter=True, version=1)
    positional = API["LLM.generate"]["positional"]
    assert positional == ["prompts", "sampling_params"] and len(seen["args"]) == 1  # prompts, sampling_params
    assert set(seen["kwargs"]) <= set(API["LLM.generate"]["keyword_only"])
    for prompt in seen["prompts"]:
        assert set(prompt) <= set(API["TokensPrompt"]) and "prompt_token_ids" in prompt
    assert "remove_lora" in API["LLMEngine.methods"] and seen["removed"] == 1


class _Reads:
    """Wraps a recorded output and notes every attribute the converter reads."""

    def __init__(self, data, kind, log):
        self._data, self._kind, self._log = data, kind, log

    def __getattr__(self, name):
        self._log.add((self._kind, name))
        value = self._data[name]
        if self._kind == "RequestOutput" and name == "outputs":
            return [_Reads(c, "CompletionOutput", self._log) for c in value]
        if self._kind == "CompletionOutput" and name == "logprobs" and value is not None:
            return [{int(k): _Reads(v, "Logprob", self._log) for k, v in p.items()} for p in value]
        return value


def test_every_attribute_the_converter_reads_exists_in_vllm():
    doc = json.loads((FIXTURES / "request_outputs.json").read_text())
    log: set[tuple[str, str]] = set()
    wrapped = [_Reads(r, "RequestOutput", log) for r in doc["request_outputs"]]
    assert len(to_generations(wrapped, set(doc["eos_ids"]), doc["max_new_tokens"])) == 4
    real = {"RequestOutput": REQUEST_OUTPUT, "CompletionOutput": set(API["CompletionOutput"]),
            "Logprob": set(API["Logprob"])}
    assert {kind for kind, _ in log} == set(real)
    unknown = sorted((kind, name) for kind, name in log if name not in real[kind])
    assert not unknown, unknown
    # and the finish reasons it branches on are vLLM's strings
    assert {"stop", "length"} <= set(API["finish_reasons"])


@pytest.mark.parametrize("name", ["request_outputs.json", "missing_logprob.json"])
def test_the_recorded_fixtures_have_vllms_fields_only(name):
    doc = json.loads((FIXTURES / name).read_text())
    for request in doc["request_outputs"]:
        assert set(request) <= REQUEST_OUTPUT, sorted(set(request) - REQUEST_OUTPUT)
        for completion in request["outputs"]:
            extra = set(completion) - set(API["CompletionOutput"])
            assert not extra, sorted(extra)
            assert completion["finish_reason"] in API["finish_reasons"] + [None]
            for position in completion["logprobs"] or []:
                for entry in position.values():
                    assert set(entry) <= set(API["Logprob"])


def test_the_stand_in_matches_vllms_classes():
    import dataclasses

    from tests.gpu import fake_vllm

    assert [f.name for f in dataclasses.fields(fake_vllm.LoRARequest)] == API["LoRARequest"][:3]
    assert [f.name for f in dataclasses.fields(fake_vllm.Logprob)] == API["Logprob"]
    with pytest.raises(ValueError, match="id must be > 0"):
        fake_vllm.LoRARequest("x", 0, "/p")
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        fake_vllm.SamplingParams(logprobs_mode="processed_logprobs")  # an engine argument, not a sampling one
    import inspect

    generate = inspect.signature(fake_vllm.LLM.generate).parameters
    assert [p for p in generate if p != "self"][:2] == API["LLM.generate"]["positional"]
    assert all(generate[k].kind is inspect.Parameter.KEYWORD_ONLY for k in ("use_tqdm", "lora_request"))
