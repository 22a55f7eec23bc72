"""The engine every objective shares: rollout -> grade -> advantages -> integrity -> update -> checkpoint.

`Engine.run` yields progress, metrics, checkpoint and log events. It stops early only on a failure (recorded in
``engine.failure``, never raised through) or a stop request (SIGINT/SIGTERM or `request_stop`), which finishes the
current update, saves a checkpoint and records an ``interrupted`` failure that says how to resume. Completion is
the caller's to announce, after the final adapter and evaluation are written.

Every attempted update writes a receipt (`receipts`). A failure before backward changes nothing and fails the run;
one from backward on (an exception, non-finite gradients), a failed receipt or a failed checkpoint write may leave
a partial update, so the run is quarantined (`quarantine`): failure reason "quarantined", RUN/quarantine.json.
"""
from __future__ import annotations

import contextlib
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


class Engine:
    def __init__(self, backend, renderer: ChatRenderer, objective, config, dataset: Dataset, reward=None,
                 run_dir: RunDir | None = None, *, handle_signals: bool = False,
                 stop: threading.Event | None = None):
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
        self._tb = _tensorboard(run_dir)
        self.receipts = Receipts(run_dir.path) if run_dir else None
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
                if self._stop.is_set():
                    yield from self._interrupt(extra)
                    return
                started = time.perf_counter()
                attempt = _Attempt(self.step + 1)
                with self._failing_closed(attempt):
                    batch, info = self._make_batch()
                    attempt.batch = batch_digest(batch)
                    check_batch(batch, self.backend.vocab_size, needs_behaviour=obj.rollout != "none",
                                needs_reference=cfg.kl_coefficient() > 0)
                    t_update = time.perf_counter()
                    attempt.phase = "backward"
                    stats = self.backend.forward_backward(
                        batch, lambda new, b, *v: obj.loss(new, b, cfg, *v), temperature=cfg.update_temperature(),
                        values=obj.value_head)
                    attempt.phase = "step"
                    stats.update(self.backend.optimizer_step())
                    attempt.phase = "committed"
                    self._receipt(attempt)
                if self.failure:
                    return
                self.step += 1  # committed
                now = time.perf_counter()
                record = {"step": self.step, **info, **stats, "update_time": now - t_update,
                          "step_time": now - started}
                record["tokens_per_s"] = info.get("rollout_tokens", batch.sampled_tokens()) / max(
                    info.get("generation_time") or record["step_time"], 1e-9)
                self._log_metrics(record)
                yield {"type": "metrics", "step": self.step, "metrics": record}
                yield {"type": "progress", "step": self.step, "total": cfg.steps}
                if self.run_dir and (self.step % cfg.save_every == 0 or self.step == cfg.steps):
                    event = self._checkpoint(extra)
                    if self.failure:
                        return
                    yield event
            if self._stop.is_set() and self.step < cfg.steps:
                yield from self._interrupt(extra)

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
            if self.run_dir:
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
        if self.run_dir:
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
        try:
            path = self.run_dir.save_checkpoint(self.step, self.backend, self.state(extra),
                                                self.config.keep_checkpoints, protect=self.protected_steps)
        except Exception as exc:  # noqa: BLE001 - whatever broke the write, the run may not go on as if saved
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

    def _sft_batch(self) -> tuple[Batch, dict[str, Any]]:
        idx = self.cursor.take(self.config.batch_size)
        samples = []
        for key, i in zip(self._keys(idx, 0), idx):
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
        while len(kept) < cfg.batch_size and rounds < cap:
            idx = cursor.take(cfg.batch_size - len(kept))
            t0 = time.perf_counter()
            episodes = rollout(self.backend, self.renderer, [self.rows[i] for i in idx], self._keys(idx, rounds, tag),
                               cfg)
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
        kept += dropped[:cfg.batch_size - len(kept)]  # short at the cap: top up with zero-advantage groups
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
        info.update(prepared)
        return batch, info

    # ---------------------------------------------------------------------------------------------- plumbing
    def _log_metrics(self, record: dict[str, Any]) -> None:
        if self.run_dir:
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
