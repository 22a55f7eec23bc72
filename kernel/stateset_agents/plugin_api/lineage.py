"""What a plugin that writes lineage records needs: the seal on a JSON record, and the base model a manifest names.

`stateset-agents lineage` (the pipeline's `lineage.trace`) checks every seal written here.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..core.jsonio import digest

#: The key under which a JSON record carries the digest of the rest of itself (manifest, promotion).
SEAL_KEY = "self_sha256"


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record with `self_sha256`: the digest of its canonical JSON without that key. A changed byte in the
    file then shows even where no other file cites it."""
    body = {k: v for k, v in record.items() if k != SEAL_KEY}
    return {**body, SEAL_KEY: digest(body)}


def seal_problem(record: Mapping[str, Any]) -> str | None:
    """Why the record's seal does not hold (None when it holds, or when the record carries none)."""
    recorded = record.get(SEAL_KEY)
    if recorded is None:
        return None
    actual = digest({k: v for k, v in record.items() if k != SEAL_KEY})
    return None if actual == recorded else f"its content digest is {actual[:12]}..., it records {recorded[:12]}..."


def base_model_reference(info: Mapping[str, Any]) -> str | None:
    """What to pass as --base-model to load the base model a manifest names (None when it cannot say)."""
    source = info.get("source")
    if source in ("local", "gguf"):
        return info.get("path")
    if source == "hub":
        return info.get("id")
    return None
