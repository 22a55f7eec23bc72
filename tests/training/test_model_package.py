"""The shared model package's seams: a backend that only answers (evaluation, chat) needs no training config, and
a hosted backend is found by the request's kind through an entry point, never imported by a trainer by name."""
from __future__ import annotations

import pytest

from stateset_agents.core.errors import InputError

pytest.importorskip("torch")
pytest.importorskip("peft")


def test_an_answering_backend_needs_no_training_config(tiny):
    from stateset_plugins.models.backend import InferenceConfig, LocalTorchBackend

    model, tokenizer = tiny
    backend = LocalTorchBackend(model, tokenizer, InferenceConfig(device="cpu"))
    prompt = tokenizer("hello how can I help", add_special_tokens=False)["input_ids"]
    [base] = backend.generate([prompt], max_new_tokens=4, temperature=0.0, adapter=False)
    [with_adapter] = backend.generate([prompt], max_new_tokens=4, temperature=0.0, adapter=True)
    assert base.ids == with_adapter.ids  # the stand-in adapter never changes an answer
    with pytest.raises(TypeError, match="only answers"):
        backend.training_state()  # a checkpoint of an answering backend: nothing to save, said so


def test_a_hosted_backend_is_found_by_its_kind():
    from stateset_plugins.models import hosted

    assert hosted.kinds()["river"].value == "stateset_plugins.providers.river.backend:backend_from_spec"
    with pytest.raises(InputError, match=r"unknown backend kind 'elsewhere'.*river") as info:
        hosted.backend_from_spec({"kind": "elsewhere"}, None, None)
    assert info.value.field == "backend"
    with pytest.raises(InputError, match="does not take region"):  # the river package's own check, reached by kind
        hosted.backend_from_spec({"kind": "river", "run_id": "sa-x", "base_model": "m", "region": "eu"}, None, None)


def test_wrapping_with_peft_prints_no_deprecation_nobody_can_act_on(tiny):
    """PEFT reads transformers' deprecated `is_gradient_checkpointing` when it wraps a model; every training and
    evaluation log used to carry that FutureWarning. Other warnings still pass."""
    import warnings

    from stateset_plugins.models.backend import InferenceConfig, LocalTorchBackend
    from stateset_plugins.models.loading import peft_wrapping

    model, tokenizer = tiny
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LocalTorchBackend(model, tokenizer, InferenceConfig(device="cpu"))
        with peft_wrapping():
            warnings.warn("something else", FutureWarning)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "is_gradient_checkpointing" in m]
    assert "something else" in messages
