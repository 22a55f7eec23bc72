"""The native engine on N processes (torchrun): the world each rank sees and the few collectives the engine needs.

Rank r of N takes its contiguous share of each update's groups (a group never spans ranks), samples and grades
them with its own RNG stream (`rank_seed`), computes its loss on its rows, and the LoRA gradients are summed across
ranks with ONE explicit ``all_reduce`` of a flat buffer, each rank's gradient weighted by its share of the global
loss's denominator (rows, or masked tokens for a token-mean loss). Not `DistributedDataParallel`: an update runs
several forward passes (reference log-probs, ``update_rows`` chunks, ``generate``), which DDP's per-backward hooks
would synchronise (or need ``no_sync`` around), and the adapter's gradients are a few MB, so one flat all-reduce
after the backward is the whole job and makes the arithmetic the same as one process's gradient of the global loss.

Every rank then takes the same optimizer step on the same gradient, so the replicas stay bitwise equal; the engine
checks that after each update (the adapter digests of every rank) and quarantines the run if they ever differ.
Rank 0 alone writes the run directory; checkpoints hold every rank's RNG state (`gather`).
"""
from __future__ import annotations

import datetime
import hashlib
import os
from dataclasses import dataclass
from typing import Any

import torch

#: What an objective's loss is a mean over (`Objective.ddp_loss`): each rank's gradient is weighted by its count
#: of these, so the summed gradient is the gradient of the global batch's loss.
LOSS_UNITS = ("rows", "tokens")
#: How long a rank waits for the others at a collective (rank 0 validates checkpoints while the others wait).
TIMEOUT = datetime.timedelta(hours=2)


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    # ------------------------------------------------------------------------------------------ collectives
    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` (picklable), in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        torch.distributed.all_gather_object(out, obj)
        return out

    def any(self, flag: bool) -> bool:
        """True on every rank when `flag` is True on any (a stop request seen by one rank stops all)."""
        if not self.distributed:
            return bool(flag)
        t = torch.tensor([1.0 if flag else 0.0], device=_device())
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return bool(t.item() > 0)

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    def reduce_gradients(self, params: list[torch.Tensor], weight: float, total: float) -> None:
        """grad <- sum_r (w_r * grad_r) / W over the ranks, in place: one all-reduce of one flat buffer."""
        if not self.distributed:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1).float() for g in grads]) * float(weight)
        torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
        flat /= float(total)
        at = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[at:at + n].view_as(g).to(g.dtype)
            at += n


SINGLE = World()


def _device() -> torch.device:
    backend = torch.distributed.get_backend()
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def from_env() -> World:
    """The world torchrun set up (RANK, WORLD_SIZE, LOCAL_RANK), the process group initialised (NCCL when this rank
    has a GPU, else gloo); a plain process is `SINGLE`."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return SINGLE
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not torch.distributed.is_initialized():
        cuda = torch.cuda.is_available() and os.environ.get("STATESET_DDP_DEVICE", "auto") != "cpu"
        if cuda:
            torch.cuda.set_device(local)  # "auto"/"cuda" then means this rank's GPU
        torch.distributed.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT)
    return World(rank=rank, size=size, local_rank=local)


def shutdown() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """Rank r's sampling stream: distinct per rank, fixed by the run's seed (the LoRA weights are initialised from
    the run's seed itself, alike on every rank)."""
    return int.from_bytes(hashlib.sha256(f"stateset-ddp:{seed}:{rank}".encode()).digest()[:4], "big")


def shares(items: list, parts: int) -> list[list]:
    """`items` cut into `parts` contiguous shares of equal length (the caller checked divisibility)."""
    k = len(items) // parts
    return [items[i * k:(i + 1) * k] for i in range(parts)]


def loss_weight(batch, units: str) -> float:
    """This rank's share of the global loss's denominator: its rows, or its masked (sampled) tokens."""
    if units == "rows":
        return float(len(batch.sample_ids))
    return float(batch.completion_mask.sum())


def check_supported(objective, config, world_size: int, *, hosted: bool = False) -> None:
    """Refuse, before anything loads, what the N-process engine cannot run exactly."""
    from stateset_agents.core.errors import InputError

    if world_size <= 1:
        return
    units = getattr(objective, "ddp_loss", None)
    if units not in LOSS_UNITS:
        raise InputError(f"{objective.name} does not run on several processes yet (its loss, advantages or "
                         "sampling use statistics of the whole batch, so a rank's share would change the result); "
                         "train it with --nproc 1", field="nproc")
    if objective.sampling_rounds(config) != 1:
        raise InputError(f"{objective.name} resamples groups until the batch is full (sampling_rounds > 1): with "
                         "--nproc the ranks would draw different numbers of prompts; use --nproc 1", field="nproc")
    if hosted:
        raise InputError("--nproc runs the local torch engine on N processes; a hosted backend trains elsewhere",
                         field="nproc")
    if getattr(config, "rollout_engine", "transformers") != "transformers":
        raise InputError("--nproc samples with transformers on each rank; rollout_engine vllm is one engine per "
                         "GPU (docs/gpu.md)", field="nproc")
    if str(config.device).startswith("cuda:"):
        raise InputError(f"device {config.device} names one GPU; with --nproc each rank takes its own "
                         "(LOCAL_RANK): use device auto or cuda", field="device")
    if getattr(config, "updates_per_batch", lambda: 1)() > 1:
        raise InputError("num_iterations/minibatches > 1 run on one process only for now (the ranks' minibatch "
                         "updates are not yet checked equal to one process's): use --nproc 1", field="nproc")
    if config.batch_size % world_size:
        raise InputError(f"batch_size {config.batch_size} does not split into {world_size} equal shares of whole "
                         f"groups: use a multiple of {world_size}", field="batch_size")
