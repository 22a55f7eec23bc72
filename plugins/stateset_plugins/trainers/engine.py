"""The engine every objective shares: rollout -> grade -> advantages -> integrity -> update -> checkpoint.

`Engine.run` yields progress, metrics, checkpoint and log events. It stops early only on a failure (recorded in
``engine.failure``, never raised through) or a stop request (SIGINT/SIGTERM or `request_stop`), which finishes the
current update, saves a checkpoint and records an ``interrupted`` failure that says how to resume. Completion is
the caller's to announce, after the final adapter and evaluation are written.

Every attempted update writes a receipt (`receipts`). A failure before backward changes nothing and fails the run;
one from backward on (an exception, non-finite gradients), a failed receipt or a failed checkpoint write may leave
a partial update, so the run is quarantined (`quarantine`): failure reason "quarantined", RUN/quarantine.json.

On N ranks (`distributed`, under torchrun) each rank runs this loop on its share of the groups; the ranks agree on
stops and failures, sum their gradients before the step, check their replicas agree after it, and rank 0 alone
writes metrics, receipts, checkpoints (with every rank's RNG state) and quarantine records.
"""
from __future__ import annotations

import contextlib
import hashlib
import signal
import statistics
import threading
import time
from typing import Any, Iterator

import torch

from stateset_agents.plugin_api.datasets import Dataset
from stateset_plugins.models.batch import Batch, Sample, collate
from stateset_plugins.models.rendering import ChatRenderer

from . import quarantine
from .data import Cursor
from .distributed import SINGLE, World, loss_weight, rank_seed, shares
from .integrity import check_batch
from .objectives.common import zero_variance_groups
from .receipts import Receipts, batch_digest
from .rollout import IntegrityError, grade, multi_turn, single_turn
from .rundir import RunDir


class _Attempt:
    """One update under way: its step, what it trains (the policy, or the value head in pre-training) and how far
    it got ("batch", "backward", "step", "committed"): from "backward" on, a failure may leave a partial update."""

    def __init__(self, step: int, kind: str = "policy"):
        self.step, self.kind, self.phase, self.batch = step, kind, "batch", None


class ReplicaDivergence(RuntimeError):
    """The ranks' adapters differ after an update: they no longer train one model."""


class Engine:
    def __init__(self, backend, renderer: ChatRenderer, objective, config, dataset: Dataset, reward=None,
                 run_dir: RunDir | None = None, *, handle_signals: bool = False,
                 stop: threading.Event | None = None, world: World = SINGLE, emulate_ranks: int = 0,
                 skip_allreduce: bool = False):
        if objective.rollout != "none" and reward is None:
            raise ValueError(f"{objective.name} needs a reward")
        self.backend, self.renderer, self.objective, self.config = backend, renderer, objective, config
        self.dataset, self.rows, self.reward, self.run_dir = dataset, dataset.rows, reward, run_dir
        self.handle_signals = handle_signals
        self.step = 0
        self.cursor = Cursor(len(self.rows), config.seed)
        self.failure: dict[str, Any] | None = None
        self.last_checkpoint: int | None = None
        self.protected_steps: set[int] = set()  # checkpoints never deleted (the best on validation so far)
        self._stop = stop or threading.Event()  # a component's cancel event plugs in here
        self._stop_reason = ""
        self.world = world
        self._writes = world.is_main  # rank 0 alone writes the run directory
        self._tb = _tensorboard(run_dir) if self._writes else None
        self.receipts = Receipts(run_dir.path) if run_dir and self._writes else None
        # test-only: skip the gradient all-reduce (and the replica check), to show the equivalence test needs it
        self._skip_allreduce = skip_allreduce
        # One process sampling the groups of `emulate_ranks` ranks, each share under that rank's RNG stream: the
        # same global batch an N-rank run trains on, updated as one batch (the reference of the DDP tests).
        self._streams = None
        if emulate_ranks > 1 and not world.distributed:
            from stateset_plugins.models.seeding import rng_state, seed_everything, set_rng_state

            saved, self._streams = rng_state(), []
            for r in range(emulate_ranks):
                seed_everything(rank_seed(config.seed, r))
                self._streams.append(rng_state())
            set_rng_state(saved)
        self._weights: dict[str, str] | None = None  # digests of the weights after the last committed update

    # --------------------------------------------------------------------------------------------- state
    def state(self, extra: dict[str, Any]) -> dict[str, Any]:
        return {"step": self.step, "cursor": self.cursor.state(), "algorithm": self.objective.name,
                "config": self.config.to_dict(), "config_digest": self.config.digest(), **extra}

    def restore(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.cursor = Cursor(len(self.rows), self.config.seed, **state["cursor"])
        self.last_checkpoint = self.step

    def request_stop(self, reason: str = "stop requested") -> None:
        self._stop_reason = reason
        self._stop.set()

    # ------------------------------------------------------------------------------------------------ loop
    def run(self, checkpoint_extra: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        cfg, obj = self.config, self.objective
        extra = checkpoint_extra or {}
        self._weights = self._digest()
        with self._signals():
            if self.step == 0 and obj.value_pretrain_steps(cfg) > 0:
                yield from self._pretrain_value()
                if self.failure:
                    return
            while self.step < cfg.steps:
                if self.world.any(self._stop.is_set()):  # only at rollout-batch boundaries: see `_batch_updates`
                    self._stop.set()
                    yield from self._interrupt(extra)
                    return
                for event in self._batch_updates(extra):
                    yield event
                    if self.failure:
                        return
                if self.failure:
                    return
            if self._stop.is_set() and self.step < cfg.steps:
                yield from self._interrupt(extra)

    def _batch_updates(self, extra: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """One batch and the optimizer steps it serves: ``num_iterations`` passes of ``minibatches`` updates, each
        a committed update with its own receipt, all scored against the behaviour log-probs the batch was sampled
        with (so the ratio leaves 1 after the first step and clipping acts). `steps` and `save_every` are multiples
        of the updates per batch (`PolicyConfig`), so checkpoints and stops fall between batches: a checkpoint never
        holds a half-used batch and resume replays nothing."""
        cfg, obj = self.config, self.objective
        started = time.perf_counter()
        attempt = _Attempt(self.step + 1)
        failed, batch, info = None, None, {}
        with self._failing_closed(attempt):
            try:
                batch, info = self._make_batch()
                attempt.batch = batch_digest(batch)
                check_batch(batch, self.backend.vocab_size, needs_behaviour=obj.rollout != "none",
                            needs_reference=cfg.kl_coefficient() > 0)
            except Exception as exc:  # noqa: BLE001 - on N ranks the others must hear of it first (in `_sync`)
                if not self.world.distributed:
                    raise
                failed = exc
        if self.failure:
            return
        plan = _plan(batch, cfg) if batch is not None else [(0, 0, None)]
        many = len(plan) > 1
        for n, (iteration, minibatch, span) in enumerate(plan):
            part = batch if span is None or batch is None else batch.rows(*span)
            attempt = attempt if n == 0 else _Attempt(self.step + 1)
            with self._failing_closed(attempt):
                stats, t_update = {}, time.perf_counter()
                if failed is None:
                    try:
                        attempt.batch = batch_digest(part)
                        attempt.phase = "backward"
                        stats = self.backend.forward_backward(
                            part, lambda new, b, *v: _with_ratio_stats(obj, obj.loss(new, b, cfg, *v), new, b),
                            temperature=cfg.update_temperature(), values=obj.value_head,
                            linear=obj.linear_in_logprobs)
                        stats["trained_tokens"] = part.sampled_tokens()  # the tokens this step's loss covers
                    except Exception as exc:  # noqa: BLE001 - on N ranks the others must hear of it first
                        if not self.world.distributed:
                            raise
                        failed, stats = exc, {}
                rollout = info if n == 0 else {}
                if self.world.distributed:
                    rollout, stats = self._sync(attempt, failed, part if failed is None else None, rollout, stats)
                attempt.phase = "step"
                stats.update(self.backend.optimizer_step())
                if self.world.distributed and not self._skip_allreduce:
                    self._check_replicas()
                attempt.phase = "committed"
                self._receipt(attempt, **({"iteration": iteration, "minibatch": minibatch} if many else {}))
            if self.failure:
                return
            self.step += 1  # committed
            now = time.perf_counter()
            record = {"step": self.step, **rollout, **stats, "update_time": now - t_update,
                      "step_time": now - (started if n == 0 else t_update)}
            if many:
                record.update(iteration=iteration, minibatch=minibatch, rows=len(part.sample_ids))
            if self.world.distributed:
                record["world_size"] = self.world.size
            if n == 0:
                record["tokens_per_s"] = rollout.get("rollout_tokens", batch.sampled_tokens() * self.world.size) / max(
                    rollout.get("generation_time") or record["step_time"], 1e-9)
            self._log_metrics(record)
            yield {"type": "metrics", "step": self.step, "metrics": record}
            yield {"type": "progress", "step": self.step, "total": cfg.steps}
            if self.run_dir and (self.step % cfg.save_every == 0 or self.step == cfg.steps):
                if n != len(plan) - 1:  # `PolicyConfig` makes this impossible; never save a half-used batch
                    raise AssertionError(f"checkpoint {self.step} would fall inside a rollout batch")
                event = self._checkpoint(extra)
                if self.failure:
                    return
                yield event

    def _pretrain_value(self) -> Iterator[dict[str, Any]]:
        """VAPO's value pre-training: rollouts of the initial policy train only the value head (Monte Carlo
        targets), so the first policy updates see a critic that already fits. A separate data cursor leaves the
        policy's prompt order as in every other objective; no committed update is counted."""
        cfg, obj = self.config, self.objective
        cursor = Cursor(len(self.rows), cfg.seed)
        losses = []
        for k in range(obj.value_pretrain_steps(cfg)):
            attempt = _Attempt(0, "value_pretrain")
            with self._failing_closed(attempt):
                batch, info = self._rl_batch(cursor, tag=f"v{k + 1}.")
                attempt.batch = batch_digest(batch)
                check_batch(batch, self.backend.vocab_size, needs_behaviour=True,
                            needs_reference=cfg.kl_coefficient() > 0)
                attempt.phase = "backward"
                stats = self.backend.forward_backward(batch, lambda new, b, v: obj.value_loss(v, b, cfg),
                                                      temperature=cfg.update_temperature(), values=True)
                attempt.phase = "step"
                stats.update(self.backend.optimizer_step(policy=False))
                attempt.phase = "committed"
                self._receipt(attempt, pretrain_step=k + 1)
            if self.failure:
                return
            losses.append(stats["loss"])
            record = {"step": 0, "phase": "value_pretrain", "pretrain_step": k + 1, **info, **stats}
            if self.run_dir and self._writes:
                self.run_dir.append_metrics(record)
        yield {"type": "log", "message": f"value pre-training: {len(losses)} updates of the value head, "
                                         f"value loss {losses[0]:.4f} -> {losses[-1]:.4f}"}

    @contextlib.contextmanager
    def _failing_closed(self, attempt: _Attempt) -> Iterator[None]:
        """An update that breaks integrity or whose loss is not finite fails the run before anything changed (the
        last good checkpoint stays); one that fails from backward on is quarantined. Other errors while the batch
        is made propagate (nothing changed). The caller checks `self.failure` after the block."""
        try:
            yield
        except IntegrityError as exc:
            self._receipt(attempt, failure="integrity")
            self._fail("integrity", str(exc), sample=exc.sample)
        except ReplicaDivergence as exc:
            self._quarantine(attempt, "replica_divergence", str(exc))
        except FloatingPointError as exc:
            _zero_grad(self.backend)
            if attempt.phase == "step":  # gradients went non-finite: the value head may have stepped already
                self._quarantine(attempt, "non_finite_gradient", str(exc))
            else:  # the loss check, before backward
                self._receipt(attempt, failure="non_finite_update")
                self._fail("non_finite_update", str(exc))
        except Exception as exc:  # noqa: BLE001 - a partial update must be recorded, whatever broke it
            if attempt.phase == "batch":
                raise
            with contextlib.suppress(Exception):
                _zero_grad(self.backend)
            cause = "receipt_write" if attempt.phase == "committed" else "partial_update"
            self._quarantine(attempt, cause, f"{type(exc).__name__} during {attempt.phase}: {exc}")

    def _sync(self, attempt: _Attempt, failed: Exception | None, batch, info, stats):
        """N ranks: agree on the update (a failure on any rank fails it on every rank, as that rank's failure),
        then sum the weighted gradients. Returns the update's record merged over the ranks."""
        weight = loss_weight(batch, self.objective.ddp_loss) if failed is None else 0.0
        mine = {"failed": None if failed is None else _describe(failed, attempt.phase), "batch": attempt.batch,
                "weight": weight, "info": info, "stats": stats,
                "scores": getattr(self, "_raw_scores", []) if failed is None else []}
        everyone = self.world.gather(mine)
        first = next(((r, s["failed"]) for r, s in enumerate(everyone) if s["failed"]), None)
        if first is not None:
            if failed is not None:
                raise failed
            rank, (kind, phase, message, sample) = first
            attempt.phase = phase
            raise _replay(kind, f"rank {rank}: {message}", sample)
        attempt.ranks = [s["batch"] for s in everyone]
        attempt.batch = hashlib.sha256("".join(attempt.ranks).encode()).hexdigest()  # the global batch
        total = sum(s["weight"] for s in everyone)
        if not self._skip_allreduce:
            self.world.reduce_gradients(self.backend.trainable_parameters(), weight, total)
        return _merge(everyone)

    def _check_replicas(self) -> None:
        digests = self.world.gather(self._digest())
        if any(d != digests[0] for d in digests[1:]):
            differ = [r for r, d in enumerate(digests) if d != digests[0]]
            raise ReplicaDivergence(f"after update {self.step + 1} the adapters of ranks {differ} differ from rank "
                                    "0's: the ranks no longer train one model")

    def _digest(self) -> dict[str, str]:
        digest = getattr(self.backend, "update_digest", None)  # a hosted backend's weights are not here
        return digest() if digest else {}

    def _receipt(self, attempt: _Attempt, *, failure: str | None = None, **more) -> dict[str, Any]:
        """The attempt's receipt: committed when `failure` is None (an error raises: the caller quarantines), else
        uncommitted and written on a best-effort basis (the failure is reported whatever happens here)."""
        committed = failure is None
        try:
            digests = self._digest()
        except Exception:  # noqa: BLE001 - the weights of a broken update may not even hash
            if committed:
                raise
            digests = {}
        record = {"step": attempt.step, "phase": attempt.kind, "committed": committed,
                  "batch_sha256": attempt.batch, "update_sha256": digests.get("adapter"), **more}
        if "value_head" in digests:
            record["value_head_sha256"] = digests["value_head"]
        if getattr(attempt, "ranks", None):
            record["rank_batch_sha256"] = attempt.ranks
        if not committed:
            record.update(failure=failure, parameters_changed=(digests != self._weights) if digests else None)
        if self.receipts:
            try:
                self.receipts.append(record)
            except Exception:  # noqa: BLE001
                if committed:
                    raise
        if committed:
            self._weights = digests
        return record

    def _quarantine(self, attempt: _Attempt, cause: str, message: str) -> None:
        more: dict[str, Any] = {"phase": attempt.phase, "batch_sha256": attempt.batch}
        if attempt.phase != "checkpoint":
            receipt = self._receipt(attempt, failure=cause)
            more["parameters_changed"] = receipt["parameters_changed"]
        if self.run_dir and self._writes:
            try:
                quarantine.record(self.run_dir.path, cause, message, step=attempt.step,
                                  last_good=self.last_checkpoint, committed_updates=self.step, **more)
            except Exception as exc:  # noqa: BLE001 - still reported as quarantined, never as a plain failure
                more["record_error"] = f"{type(exc).__name__}: {exc}"
        self.failure = quarantine.failure(cause, message, committed=self.step, update=attempt.step,
                                          last_good=self.last_checkpoint,
                                          run_path=self.run_dir.path if self.run_dir else None, **more)

    def _fail(self, reason: str, message: str, **more) -> None:
        kept = self.last_checkpoint
        self.failure = {"reason": reason, "message": message, "step": self.step,
                        "last_checkpoint_step": kept, **more}

    def _interrupt(self, extra) -> Iterator[dict[str, Any]]:
        if self.run_dir and self.last_checkpoint != self.step:
            event = self._checkpoint(extra)
            if self.failure:
                return
            yield event
        hint = "rerun the same command with --resume" if self.run_dir else "no output directory: nothing saved"
        self._fail("interrupted", f"{self._stop_reason or 'stopped'} after {self.step} of {self.config.steps} "
                                  f"updates; {hint}", resumable=bool(self.run_dir))

    def _checkpoint(self, extra) -> dict[str, Any] | None:
        """Save checkpoint `step`; a failed write quarantines the run (None, `self.failure` set)."""
        from stateset_plugins.models.seeding import rng_state

        path, error = None, None
        ranks = self.world.gather(rng_state()) if self.world.distributed else None  # every rank's stream
        try:
            if self._writes:
                state = {**self.state(extra), "world_size": self.world.size} if ranks else self.state(extra)
                path = self.run_dir.save_checkpoint(self.step, self.backend, state, self.config.keep_checkpoints,
                                                    protect=self.protected_steps, rank_rng=ranks)
            else:
                path = self.run_dir.checkpoints / f"step-{self.step:06d}"
        except Exception as exc:  # noqa: BLE001 - whatever broke the write, the run may not go on as if saved
            error = exc
        if self.world.distributed:  # rank 0's write failing stops every rank
            written = self.world.gather(None if error is None else f"{type(error).__name__}: {error}")[0]
            error = error or (RuntimeError(written) if written else None)
        if error is not None:
            exc = error
            attempt = _Attempt(self.step)
            attempt.phase = "checkpoint"
            self._quarantine(attempt, "checkpoint_write", f"writing checkpoint {self.step} failed: "
                                                          f"{type(exc).__name__}: {exc}")
            return None
        self.last_checkpoint = self.step
        return {"type": "checkpoint", "step": self.step, "path": str(path)}

    # ---------------------------------------------------------------------------------------------- batches
    def _keys(self, idx: list[int], round_: int, tag: str = "") -> list[str]:
        tag = tag or f"u{self.step + 1}."
        return [f"{self.rows[i]['id']}:line{self.rows[i].get('_line', i + 1)}:{tag}{round_}.{j}"
                for j, i in enumerate(idx)]

    def _make_batch(self) -> tuple[Batch, dict[str, Any]]:
        if self.objective.rollout == "none":
            return self._sft_batch()
        return self._rl_batch()

    def _mine(self, idx: list[int], keys: list[str]) -> tuple[list[int], list[str]]:
        """This rank's contiguous share of the update's prompts (the cursor is global and alike on every rank)."""
        if not self.world.distributed:
            return idx, keys
        r, n = self.world.rank, self.world.size
        return shares(idx, n)[r], shares(keys, n)[r]

    def _rollout(self, rollout, idx: list[int], keys: list[str]):
        if self._streams is None:
            return rollout(self.backend, self.renderer, [self.rows[i] for i in idx], keys, self.config)
        from stateset_plugins.models.seeding import rng_state, set_rng_state

        episodes, saved = [], rng_state()
        for r, (part, part_keys) in enumerate(zip(shares(idx, len(self._streams)),
                                                  shares(keys, len(self._streams)))):
            set_rng_state(self._streams[r])
            episodes += rollout(self.backend, self.renderer, [self.rows[i] for i in part], part_keys, self.config)
            self._streams[r] = rng_state()
        set_rng_state(saved)
        return episodes

    def _sft_batch(self) -> tuple[Batch, dict[str, Any]]:
        idx = self.cursor.take(self.config.batch_size)
        idx, keys = self._mine(idx, self._keys(idx, 0))
        samples = []
        for key, i in zip(keys, idx):
            row = self.rows[i]
            prompt = self.renderer.prompt_ids(row["prompt"], row.get("tools"))
            completion = self.renderer.completion_ids(row["prompt"], row["completion"], row.get("tools"))
            samples.append(Sample(key, key, prompt, completion, [True] * len(completion), [None] * len(completion)))
        batch = collate(samples, self.backend.pad_id, 1)
        batch.rewards = torch.zeros(len(samples))
        batch.advantages = torch.zeros(len(samples))
        return batch, {}

    def _rl_batch(self, cursor: Cursor | None = None, tag: str = "") -> tuple[Batch, dict[str, Any]]:
        cfg, obj = self.config, self.objective
        cursor = cursor or self.cursor
        g = cfg.num_generations
        rollout = multi_turn if obj.rollout == "multi_turn" else single_turn
        cap = obj.sampling_rounds(cfg)
        kept, dropped, raw_scores = [], [], []
        gen_time, grade_time, rounds, zero_var, groups_seen = 0.0, 0.0, 0, 0, 0
        share = cfg.batch_size // self.world.size  # one round on N ranks (`distributed.check_supported`)
        while len(kept) < share and rounds < cap:
            idx = cursor.take(cfg.batch_size - len(kept))
            idx, keys = self._mine(idx, self._keys(idx, rounds, tag))
            t0 = time.perf_counter()
            episodes = self._rollout(rollout, idx, keys)
            t1 = time.perf_counter()
            grade(self.reward, episodes)
            grade_time += time.perf_counter() - t1
            gen_time += t1 - t0
            rounds += 1
            for j in range(len(idx)):
                group = episodes[j * g:(j + 1) * g]
                raw = torch.tensor([ep.reward for ep in group], dtype=torch.float32)
                raw_scores.extend(raw.tolist())
                lengths = torch.tensor([sum(ep.sample.sampled) for ep in group])
                truncated = torch.tensor([ep.sample.truncated for ep in group])
                shaped = obj.shape_rewards(raw, lengths, truncated, cfg)
                groups_seen += 1
                zero_var += int(zero_variance_groups(shaped, g)[0])
                keep = obj.keep_group(shaped, cfg)
                (kept if keep else dropped).append((group, shaped))
        kept += dropped[:share - len(kept)]  # short at the cap: top up with zero-advantage groups
        episodes = [ep for group, _ in kept for ep in group]
        batch = collate([ep.sample for ep in episodes], self.backend.pad_id, g)
        batch.rewards = torch.cat([shaped for _, shaped in kept])
        batch.advantages = obj.advantages(batch.rewards, g, cfg)
        if cfg.kl_coefficient() > 0:
            batch.ref_logp = self.backend.logprobs(batch, temperature=cfg.temperature, reference=True)
        prepared = obj.prepare(batch, self.backend, cfg)  # critics: values and GAE
        lengths = [sum(ep.sample.sampled) for ep in episodes]
        raw_all = torch.tensor(raw_scores)  # not `statistics`: a NaN must reach the integrity check, not crash here
        info = {"reward_mean": float(raw_all.mean()), "reward_std": float(raw_all.std(unbiased=False)),
                "zero_variance_fraction": zero_var / max(groups_seen, 1), "sampling_rounds": rounds,
                "completion_length": statistics.fmean(lengths), "generation_time": gen_time,
                "grade_time": grade_time, "rollout_tokens": sum(lengths),
                "shaped_reward_mean": float(batch.rewards.mean())}  # the batch's rewards, shaped, after filtering
        self._raw_scores = raw_scores  # the ranks' merged record recomputes the reward's mean and spread
        info.update(prepared)
        return batch, info

    # ---------------------------------------------------------------------------------------------- plumbing
    def _log_metrics(self, record: dict[str, Any]) -> None:
        if self.run_dir and self._writes:
            self.run_dir.append_metrics(record)
        if self._tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != "step":
                    self._tb.add_scalar(k, v, record["step"])
            self._tb.flush()

    @contextlib.contextmanager
    def _signals(self):
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum, _frame):
            self.request_stop(f"received {signal.Signals(signum).name}")

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


def _plan(batch: Batch, config) -> list[tuple[int, int, tuple[int, int] | None]]:
    """(iteration, minibatch, row span or None for the whole batch) of each optimizer step a batch serves, in
    order: every pass walks the same contiguous minibatches of whole groups (a group's rows stay together, so
    group-level ratios such as GEPO's see their whole group)."""
    mu, parts = config.reuse()
    if mu * parts == 1:
        return [(0, 0, None)]
    g = max(batch.group_size, 1)
    groups = shares(list(range(len(batch.sample_ids) // g)), min(parts, max(len(batch.sample_ids) // g, 1)))
    spans = [(part[0] * g, (part[-1] + 1) * g) for part in groups if part]
    return [(k, j, span if len(spans) > 1 else None) for k in range(mu) for j, span in enumerate(spans)]


def _with_ratio_stats(objective, result, new_logp, batch):
    """The loss's stats plus, for a sampling objective, the update's approximate KL to the behaviour policy
    (mean over sampled tokens of (r - 1) - log r, r = pi_theta / pi_old; 0 on the first pass) and the ratio's
    spread, so `metrics.jsonl` shows how far each reuse of a rollout batch has moved."""
    loss, stats = result
    if objective.rollout == "none" or batch.behaviour_logp is None:
        return loss, stats
    from .objectives.common import masked_token_mean, safe

    mask = batch.completion_mask
    log_r = (safe(new_logp.detach(), mask) - safe(batch.behaviour_logp, mask))
    ratio = torch.exp(log_r)
    stats = dict(stats)
    stats.setdefault("approx_kl", float(masked_token_mean(ratio - 1 - log_r, mask)))
    on = mask > 0
    if bool(on.any()):
        stats.setdefault("ratio_max", float(ratio[on].max()))
        stats.setdefault("ratio_min", float(ratio[on].min()))
    return loss, stats


def _describe(exc: Exception, phase: str) -> tuple[str, str, str, str | None]:
    kind = ("integrity" if isinstance(exc, IntegrityError) else
            "non_finite" if isinstance(exc, FloatingPointError) else "error")
    return kind, phase, f"{type(exc).__name__}: {exc}" if kind == "error" else str(exc), getattr(exc, "sample", None)


def _replay(kind: str, message: str, sample: str | None) -> Exception:
    """Another rank's failure, raised here as the same kind, so every rank fails (or quarantines) alike."""
    if kind == "integrity":
        return IntegrityError(sample or "?", message)
    if kind == "non_finite":
        return FloatingPointError(message)
    return RuntimeError(message)


def _merge(ranks: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One record of the update from every rank's: the loss and the update's statistics weighted as the loss is,
    the rollout's averaged over the (equal) shares, token counts summed, times the slowest rank's, and the reward's
    mean and spread over every score."""
    def combine(key: str, values: list, weights: list[float]) -> Any:
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if numbers and key in ("rollout_tokens", "trained_tokens"):
            return sum(values)
        if not numbers or all(v == values[0] for v in values):
            return values[0]
        if key.endswith("_time"):
            return max(values)
        return sum(v * w for v, w in zip(values, weights)) / max(sum(weights), 1e-30)

    out = []
    for part, weights in (("info", [1.0] * len(ranks)), ("stats", [r["weight"] for r in ranks])):
        keys = list(dict.fromkeys(k for r in ranks for k in r[part]))
        out.append({k: combine(k, [r[part][k] for r in ranks if k in r[part]],
                               [w for r, w in zip(ranks, weights) if k in r[part]]) for k in keys})
    scores = torch.tensor([x for r in ranks for x in r["scores"]], dtype=torch.float32)
    if len(scores) and "reward_mean" in out[0]:
        out[0].update(reward_mean=float(scores.mean()), reward_std=float(scores.std(unbiased=False)))
    return out[0], out[1]


def _zero_grad(backend) -> None:
    zero = getattr(backend, "zero_grad", None)
    if zero:
        zero()


def _tensorboard(run_dir: RunDir | None):
    if run_dir is None:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter  # needs the optional `tensorboard` package
    except ImportError:
        return None
    return SummaryWriter(str(run_dir.path / "tensorboard"))
