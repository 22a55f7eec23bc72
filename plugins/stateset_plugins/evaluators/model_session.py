"""Loading a base model (and optionally a LoRA adapter) for inference, through the loader, backend and chat
renderer training uses (`stateset_plugins.models`), so evaluation generates exactly as training's held-out
evaluation does."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import load_json, sha256_file
from stateset_agents.plugin_api.lineage import base_model_reference

ADAPTER_WEIGHTS = "adapter_model.safetensors"
DEFAULT_MAX_PROMPT_TOKENS = 512


def run_manifest_of(adapter: str | None) -> dict[str, Any] | None:
    """The manifest.json of an adapter's run: beside RUN/adapter (or a registry entry's), or, for a checkpoint's
    adapter (RUN/checkpoints/step-K/adapter), the run's."""
    if not adapter:
        return None
    path = _manifest_path(Path(adapter))
    return load_json(path) if path else None


def _manifest_path(adapter: Path) -> Path | None:
    beside = adapter.parent / "manifest.json"
    if beside.exists():
        return beside
    if _checkpoint_step(adapter) is not None:
        run = adapter.parent.parent.parent / "manifest.json"
        return run if run.exists() else None
    return None


def _checkpoint_step(adapter: Path) -> int | None:
    step_dir = adapter.parent
    if step_dir.parent.name == "checkpoints" and step_dir.name.startswith("step-") and adapter.name == "adapter":
        return int(step_dir.name.split("-")[1])
    return None


def manifest_path_of(adapter: str) -> Path | None:
    return _manifest_path(Path(adapter))


def resolve_base_model(requested: str | None, manifest: Mapping[str, Any] | None) -> str | None:
    """--base-model when given; else the base model the adapter's run trained on; else None (offline default)."""
    if requested:
        return requested
    if manifest:
        ref = base_model_reference(manifest.get("base_model") or {})
        if ref is None:
            raise InputError("the run's manifest does not say where its base model is; pass --base-model",
                             field="base_model")
        return ref
    return None


def resolve_protocol(protocol: Mapping[str, Any] | None, decoding: Mapping[str, Any] | None,
                     manifest: Mapping[str, Any] | None):
    """The evaluation protocol of a request (`models.evaluation.EvalProtocol`): its ``protocol`` block, else an
    older ``decoding`` block's temperature, max_new_tokens and seed; never the run's training sampling. And the
    prompt length: the request's, else the run's training config (prompts are rendered as training rendered
    them), else 512."""
    from stateset_plugins.models.evaluation import EvalProtocol

    values = dict(protocol or {})
    for key in ("temperature", "max_new_tokens", "seed"):
        if (decoding or {}).get(key) is not None:
            values.setdefault(key, decoding[key])
    prompt_tokens = (decoding or {}).get("max_prompt_tokens") or ((manifest or {}).get("config") or {}).get(
        "max_prompt_tokens") or DEFAULT_MAX_PROMPT_TOKENS
    return EvalProtocol.from_dict(values), int(prompt_tokens)


def verify_adapter(adapter: str, manifest: Mapping[str, Any] | None) -> str:
    """sha256 of the adapter weights; refuse weights that differ from what the run's manifest recorded (the final
    adapter's, or a checkpoint's validation record)."""
    weights = Path(adapter) / ADAPTER_WEIGHTS
    if not weights.exists():
        raise InputError(f"no {ADAPTER_WEIGHTS} in the adapter directory", path=str(adapter))
    sha = sha256_file(weights)
    step = _checkpoint_step(Path(adapter))
    if step is None:
        recorded = ((manifest or {}).get("adapter") or {}).get("sha256")
    else:
        records = ((manifest or {}).get("selection") or {}).get("checkpoints") or []
        recorded = next((r.get("adapter_sha256") for r in records if r.get("step") == step), None)
    if recorded and recorded != sha:
        raise InputError(f"the adapter weights' sha256 ({sha[:12]}...) differs from the run manifest's "
                         f"({recorded[:12]}...): the file changed after training", path=str(weights))
    return sha


@dataclass
class ModelSession:
    """A loaded model ready to answer: the trainer's backend (adapter on = candidate, off = base) and renderer."""

    backend: Any
    renderer: Any
    base_model: dict[str, Any]
    adapter: dict[str, Any] | None
    decoding: dict[str, Any] = field(default_factory=dict)


def load_session(base_model: str | None, adapter: str | None, decoding: Mapping[str, Any]) -> ModelSession:
    from stateset_plugins.models.backend import InferenceConfig, LocalTorchBackend
    from stateset_plugins.models.loading import load_base_model, peft_wrapping
    from stateset_plugins.models.rendering import ChatRenderer

    model, tokenizer, info = load_base_model(base_model)
    adapter_info = None
    if adapter:
        from peft import PeftModel

        # trainable only because the backend builds an optimizer over trainable weights; nothing is updated
        with peft_wrapping():
            model = PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
        adapter_info = {"path": str(adapter), "sha256": sha256_file(Path(adapter) / ADAPTER_WEIGHTS)}
    backend = LocalTorchBackend(model, tokenizer, InferenceConfig())
    backend.model.eval()  # no dropout at inference, whatever the adapter was trained with
    renderer = ChatRenderer(tokenizer, int(decoding["max_prompt_tokens"]))
    return ModelSession(backend, renderer, info, adapter_info, dict(decoding))


@contextlib.contextmanager
def reward_component(name: str, config: Mapping[str, Any] | None = None, runtime: str = "inprocess"
                     ) -> Iterator[Any]:
    from stateset_agents.core.runtimes import load_component

    full = name if ":" in name else f"reward:{name}"
    with load_component(full, config=dict(config or {}), runtime=runtime) as reward:
        yield reward
