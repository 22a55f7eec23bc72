"""RUN/receipts.jsonl: one line per attempted update, apart from metrics.jsonl.

A receipt names what the update saw (the rollout batch digest: prompt and sampled token ids, behaviour log-probs,
rewards; for SFT the prompt/completion ids), what it left (the update digest: `plugin_api.checkpoints.tensors_digest`
of the adapter's weights after the optimizer step) and whether it was committed; ``prev_sha256`` chains each line
to the one before, so an edited or dropped line shows (`stateset-agents lineage` verifies them).
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import orjson
import torch

from stateset_agents.core.jsonio import atomic_write, dumps_line
from stateset_agents.plugin_api.checkpoints import RECEIPTS_FILE, chain_digest
from stateset_plugins.models.batch import Batch


def _tensor_bytes(t: torch.Tensor | None) -> bytes:
    if t is None:
        return b""
    t = t.detach().cpu().contiguous()
    return repr((str(t.dtype), tuple(t.shape))).encode() + t.reshape(-1).view(torch.uint8).numpy().tobytes()


def batch_digest(batch: Batch) -> str:
    """sha256 over the batch as the update sees it: sample ids, token ids (prompt and completion region), masks,
    behaviour log-probs (NaN where nothing was sampled) and rewards."""
    h = hashlib.sha256()
    h.update(orjson.dumps(batch.sample_ids))
    for t in (batch.input_ids, batch.attention_mask, batch.completion_mask, batch.behaviour_logp,
              batch.rewards.float() if batch.rewards is not None else None):
        h.update(_tensor_bytes(t))
    return h.hexdigest()


class Receipts:
    """The run's receipt log: `append` writes one whole line with one write(2) on an O_APPEND descriptor (a kill
    leaves at most a partial last line, which `truncate` drops on resume)."""

    def __init__(self, run_path: str | os.PathLike):
        self.path = Path(run_path) / RECEIPTS_FILE
        self._last: bytes | None = None
        self._loaded = False

    def _last_line(self) -> bytes | None:
        if not self._loaded:
            lines = [r for r in self.path.read_bytes().splitlines() if r.strip()] if self.path.exists() else []
            self._last, self._loaded = (lines[-1] if lines else None), True
        return self._last

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        record = {**record, "at": time.time(), "prev_sha256": chain_digest(self._last_line())}
        line = dumps_line(record)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self._last = line[:-1]
        return record

    def truncate(self, step: int) -> None:
        """On resume, keep the receipts of the updates the checkpoint holds (steps up to `step`; value pre-training
        is step 0), ending at a whole line so the chain continues from it. With none of them (a checkpoint from
        before receipts), an "origin" line says the receipts begin after `step`."""
        kept = []
        for raw in self.path.read_bytes().splitlines() if self.path.exists() else []:
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                break  # a partial line ends what can be chained
            if rec.get("step", 0) > step:
                break
            kept.append(raw)
        with atomic_write(self.path) as f:
            f.write(b"".join(r + b"\n" for r in kept))
        self._loaded, self._last = True, (kept[-1] if kept else None)
        accounted = [rec for rec in map(orjson.loads, kept) if rec.get("step", 0) > 0 or rec.get("phase") == "origin"]
        if step > 0 and not accounted:
            self.append({"step": step, "phase": "origin", "committed": None,
                         "note": f"the receipts of updates 1..{step} are not in this run directory"})

    def last_sha256(self) -> str | None:
        return chain_digest(self._last_line())
