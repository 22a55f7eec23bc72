"""The serving engine under the gateway: its greedy decoding equals transformers' `generate` for the base model and
for an adapter, adapters switch without reloading the base weights, and a request that joins a running batch gets
the tokens it gets alone (continuous batching joins KV caches correctly)."""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from stateset_agents.plugin_api.serving import GenerationRequest  # noqa: E402


def run(engine, request, *, started: threading.Event | None = None) -> dict:
    done = threading.Event()
    got: dict = {"deltas": []}

    def emit(event):
        if event["type"] == "delta":
            got["deltas"].append(event["content"])
            if started is not None:
                started.set()
        elif event["type"] == "done":
            got["done"] = event
        elif event["type"] in ("end", "failed"):
            got[event["type"]] = event
            done.set()

    engine.submit(request, emit)
    got["wait"] = done
    return got


def finish(got) -> dict:
    assert got["wait"].wait(60) and "end" in got, got
    return got["done"]


def reference_text(engine, model, messages, max_tokens) -> str:
    prompt = engine.renderer.prompt_ids(messages, None)
    with torch.inference_mode():
        out = model.generate(input_ids=torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False,
                             pad_token_id=engine.pad_id)
    return engine.tokenizer.decode(out[0, len(prompt):], skip_special_tokens=True).strip()


def test_greedy_replies_equal_transformers_generate_for_the_base_and_the_adapter(served):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    engine = served.running.gateway.engine
    messages = [{"role": "user", "content": "count to five"}]
    base_weight = engine.model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    pointer = base_weight.data_ptr()
    base_dir = engine.base_identity["path"]
    references = {served.base: AutoModelForCausalLM.from_pretrained(base_dir).eval(),
                  served.adapter: PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir),
                                                            str(served.registry / served.adapter / "adapter")).eval()}
    for name in (served.adapter, served.base, served.adapter):  # switching both ways
        done = finish(run(engine, GenerationRequest(model=name, messages=messages, max_tokens=12, temperature=0)))
        assert done["message"]["content"] == reference_text(engine, references[name], messages, 12), name
    # one copy of the base weights, never reloaded
    assert engine.model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight.data_ptr() == pointer
    assert set(engine.model.peft_config) == {served.adapter}
    # the adapter changes the answers (else this test could not tell them apart)
    assert reference_text(engine, references[served.base], messages, 12) != \
        reference_text(engine, references[served.adapter], messages, 12)


def test_a_request_joining_a_running_batch_gets_the_tokens_it_gets_alone(served):
    engine = served.running.gateway.engine
    late = GenerationRequest(model=served.base, messages=[{"role": "user", "content": "please refund order 42"}],
                             max_tokens=16, temperature=0, ignore_eos=True)
    alone = finish(run(engine, late))["message"]["content"]
    batches = engine.stats()["batches"]
    started = threading.Event()
    long = run(engine, GenerationRequest(model=served.base, messages=[{"role": "user", "content": "hi"}],
                                         max_tokens=60, temperature=0, ignore_eos=True), started=started)
    assert started.wait(30)
    joined = finish(run(engine, late))
    finish(long)
    assert joined["message"]["content"] == alone
    assert engine.stats()["batches"] == batches + 2  # two prefills; the late one joined the running batch
