"""What this machine can do, measured in the same run as a benchmark: memory bandwidth and resident memory.

CPU decoding is bound by memory bandwidth: every new token reads every weight once, and one decoding step of a
batch of B rows yields B tokens. So rollout tokens/s cannot exceed ``bandwidth / bytes of weights x B``; a
benchmark reports its rollout tokens/s as a share of that ceiling (`bandwidth_share`).
"""
from __future__ import annotations

import os
import resource
import time


def copy_bandwidth(megabytes: int = 1024, repeats: int = 5) -> dict:
    """Bytes moved per second by a large array copy (numpy: one read and one write of each byte), best of
    `repeats`: the figure decoding's weight reads compete with. The array is far larger than any cache."""
    import numpy as np

    n = megabytes * 1024 * 1024 // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch every page first
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    moved = 2 * src.nbytes  # read src, write dst
    return {"bytes_per_s": moved / best, "gb_per_s": moved / best / 1e9, "array_mb": megabytes,
            "repeats": repeats, "method": "numpy copyto of a float64 array (bytes read + written) / best time"}


def weight_bytes(model, element_size: int | None = None) -> int:
    """Bytes of every parameter a forward pass reads (the base weights and any adapter), tied weights once;
    `element_size`: as if each were stored with that many bytes (a bfloat16 sampler's copy: 2)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * (element_size or p.element_size())
    return total


def bandwidth_share(tokens_per_s: float, bandwidth: float, weights: int, rows: int) -> dict:
    """Rollout tokens/s against the ceiling ``bandwidth / weights x rows`` (rows decoded together)."""
    ceiling = bandwidth / max(weights, 1) * rows
    return {"tokens_per_s": tokens_per_s, "ceiling_tokens_per_s": ceiling, "share": tokens_per_s / ceiling,
            "weight_bytes": weights, "rows_decoded_together": rows, "bandwidth_bytes_per_s": bandwidth}


def rss_mb() -> float:
    """This process's resident memory now (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM (Linux; its own since exec), else ru_maxrss, which a child
    inherits from its parent (a parent's large arrays would count in every run it starts)."""
    try:
        with open(f"/proc/{os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_timed(trainer, trained_of, step_times: list, step_cpu: list) -> list[int]:
    """Run a transformers Trainer, appending each optimizer step's wall and CPU seconds to the given lists (a
    caller's own hooks may read them meanwhile); returns the tokens each loss call trained (`trained_of(inputs)`)."""
    from transformers import TrainerCallback

    trained: list[int] = []
    loss = trainer.compute_loss

    def counted(model, inputs, *a, **k):
        trained.append(int(trained_of(inputs)))
        return loss(model, inputs, *a, **k)

    class Clock(TrainerCallback):
        def on_step_begin(self, *_a, **_k):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, *_a, **_k):
            step_times.append(time.perf_counter() - self.t0)
            step_cpu.append(time.process_time() - self.c0)

    trainer.compute_loss = counted
    trainer.add_callback(Clock())
    trainer.train()
    return trained
