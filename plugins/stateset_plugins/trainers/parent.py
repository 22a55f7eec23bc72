"""`train --init-adapter RUN/adapter`: start a run (RL, typically) from a parent run's adapter (an SFT run,
typically) instead of a fresh LoRA.

The parent's weights are loaded once, before the first update; lineage records the parent run (its run id, the
sha256 of its manifest and of the adapter weights). A resumed run loads its own checkpoint instead, and the resume
identity check includes the parent's adapter sha256, so a checkpoint never continues under another parent. The KL
reference stays the base model (the adapter switched off), as in every run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import load_json, sha256_file

WEIGHTS = "adapter_model.safetensors"


def _manifest_beside(adapter: Path) -> Path | None:
    """RUN/adapter -> RUN/manifest.json; RUN/checkpoints/step-K/adapter -> RUN/manifest.json."""
    for candidate in (adapter.parent / "manifest.json", adapter.parent.parent.parent / "manifest.json"):
        if candidate.is_file():
            return candidate
    return None


def base_model_identity(info: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two base-model records the same model: their content digests where the record has them (the
    same GGUF file installed at another path is the same model), else the whole record."""
    digests = {k: v for k, v in info.items() if k.endswith("sha256")}
    return digests or dict(info)


class InitAdapter:
    def __init__(self, path: Path, adapter_sha256: str, manifest_path: Path | None):
        self.path, self.adapter_sha256, self.manifest_path = path, adapter_sha256, manifest_path
        self.manifest: Mapping[str, Any] | None = load_json(manifest_path) if manifest_path else None

    @classmethod
    def open(cls, path: str | Path) -> "InitAdapter":
        p = Path(path)
        if (p / "adapter" / WEIGHTS).is_file():  # a run directory: its final adapter
            p = p / "adapter"
        if not (p / WEIGHTS).is_file():
            raise InputError(f"--init-adapter needs an adapter directory (RUN/adapter) holding {WEIGHTS}",
                             path=str(path), field="init_adapter")
        sha = sha256_file(p / WEIGHTS)
        manifest_path = _manifest_beside(p)
        parent = cls(p.resolve(), sha, manifest_path)
        recorded = ((parent.manifest or {}).get("adapter") or {}).get("sha256")
        if manifest_path and manifest_path.parent == p.parent and recorded and recorded != sha:
            raise InputError(f"the parent adapter's sha256 ({sha[:12]}...) differs from its run manifest's "
                             f"({recorded[:12]}...): the file changed after training", path=str(p / WEIGHTS),
                             field="init_adapter")
        if parent.manifest and parent.manifest.get("status") not in (None, "completed"):
            raise InputError(f"the parent run did not complete (status {parent.manifest.get('status')!r})",
                             path=str(manifest_path), field="init_adapter")
        return parent

    def check_base_model(self, base_model_info: Mapping[str, Any]) -> None:
        parent_base = (self.manifest or {}).get("base_model")
        if parent_base and base_model_identity(parent_base) != base_model_identity(base_model_info):
            raise InputError(f"the parent adapter was trained on base model {parent_base}, this run loads "
                             f"{dict(base_model_info)}: an adapter fits only its own base model",
                             path=str(self.path), field="init_adapter")

    def load_into(self, backend) -> None:
        try:
            backend.load_adapter(self.path)
        except (ValueError, RuntimeError, KeyError) as exc:
            raise InputError(f"the parent adapter does not fit this run's LoRA (lora_r, lora_alpha and "
                             f"lora_target_modules must match the parent's): {exc}", path=str(self.path),
                             field="init_adapter") from None

    def lineage(self) -> dict[str, Any]:
        m = self.manifest or {}
        return {"adapter_path": str(self.path), "adapter_sha256": self.adapter_sha256, "run_id": m.get("run_id"),
                "algorithm": m.get("algorithm"), "manifest_path": str(self.manifest_path) if self.manifest_path
                else None, "manifest_sha256": sha256_file(self.manifest_path) if self.manifest_path else None,
                "dataset_sha256": (m.get("dataset") or {}).get("sha256")}
