"""`chat-remote`: a chat session with a collected run's adapter on a provider, under its own hard cap.

The session is a job like a training job, under the session id RUN_ID-chat (so at most one chat resource per run
exists, found by name, and `costs --orphans` sees a leftover one):

1. Before anything is rented: the provider's quote (its API or dated price table) for `max_minutes` (and, where
   tokens are billed, `max_turns` turns), refused above the cap.
2. A live resource of an earlier session of the same run (a crashed client) is terminated and booked first.
3. `chat_open` creates the resource (or attaches to the one a lost response already created) with a deadline the
   remote side enforces; the kernel waits until it answers, with the watchdog polling.
4. Every turn is `chat_turn`, and the watchdog (a background thread polling `status`, and a check before and after
   each turn that reserves the worst case of one turn) terminates the session before the cap less the margin.
5. On exit, Ctrl-C or any error the resource is terminated (destroyed, never merely stopped) and the spend goes to
   the ledger with kind `chat`.

The session object is the "model" of `stateset-agents chat`'s loop: `run(request)` yields one turn's final event.
"""
from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..core.errors import InputError, StatesetError
from ..core.jsonio import digest, load_json
from . import state
from .cap import FINAL_STATES, Watchdog, check_cap_value, enforce_cap
from .session import _record
from .worker import file_entries

SUFFIX = "-chat"
DEFAULT_MAX_NEW_TOKENS = 256  # the chat evaluator's default
STORAGE_GB = 20  # disk a chat machine gets where the provider bills it (RunPod's container disk)


class SessionEnded(StatesetError):
    """The watchdog (cap, deadline) or the turn limit ended the session; its resource is already terminated."""

    exit_code = 4

    def __init__(self, message: str, outcome: str):
        super().__init__(message)
        self.outcome = outcome


def session_id_for(run_id: str) -> str:
    return f"{run_id}{SUFFIX}"


def adapter_listing(run_dir: Path) -> dict[str, Any]:
    """The files a provider puts next to the model: adapter/* and manifest.json, each with sha256 and size. The
    adapter weights must still be what the run's manifest recorded."""
    adapter, manifest = run_dir / "adapter", run_dir / "manifest.json"
    if not adapter.is_dir() or not manifest.is_file():
        raise InputError("the run directory has no adapter/ and manifest.json to chat with", path=str(run_dir))
    recorded = (load_json(manifest).get("adapter") or {}).get("sha256")
    files = file_entries(run_dir, sorted(p for p in adapter.rglob("*") if p.is_file()) + [manifest])
    weights = adapter / "adapter_model.safetensors"
    entry = next((f for f in files if f["path"] == weights.relative_to(run_dir).as_posix()), None)
    if recorded and entry is not None and entry["sha256"] != recorded:
        raise InputError("the adapter weights changed after training (sha256 differs from the manifest)",
                         path=str(weights))
    return {"dir": str(run_dir), "files": files, "sha256": digest(files)}


class ChatSession:
    def __init__(self, provider, provider_name: str, run_id: str, *, max_cost: Any, max_minutes: float,
                 gpu: str | None = None, image: str | None = None, max_turns: int = 50,
                 decoding: Mapping[str, Any] | None = None, poll_s: float = 15.0,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 on_tick: Callable[[dict], None] | None = None, watch: bool = True):
        self.provider, self.provider_name, self.run_id = provider, provider_name, run_id
        self.session_id = session_id_for(run_id)
        self.cap = check_cap_value(max_cost)
        if not max_minutes > 0:
            raise InputError(f"--max-minutes must be positive, got {max_minutes}", field="max_minutes")
        if max_turns < 1:
            raise InputError(f"--max-turns must be at least 1, got {max_turns}", field="max_turns")
        self.max_minutes, self.max_turns = float(max_minutes), int(max_turns)
        self.gpu, self.image = gpu, image
        self.decoding = {k: v for k, v in dict(decoding or {}).items() if v is not None}
        self.poll_s, self.clock, self.sleep, self.on_tick, self.watch = poll_s, clock, sleep, on_tick, watch
        self.turns = 0
        self.dog: Watchdog | None = None
        self.final: dict[str, Any] | None = None
        self.job: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._exit = contextlib.ExitStack()

    # ------------------------------------------------------------------------------------------------- opening
    def quote(self) -> tuple[dict[str, Any], float]:
        record = _record(self.run_id)
        if record.get("phase") != "collected":
            raise StatesetError(f"run {self.run_id} has no collected adapter to chat with "
                                f"(phase {record.get('phase')})")
        self.record = record
        self.listing = adapter_listing(Path(record["output"]))
        manifest = load_json(Path(record["output"]) / "manifest.json")
        self.base_model = manifest.get("base_model") or {}
        hours = self.max_minutes / 60.0
        quote = self.provider.quote({"gpu": self.gpu, "gpus": 1, "max_hours": hours, "storage_gb": STORAGE_GB,
                                     "image": self.image, "base_model": self._hosted_model(),
                                     "chat": {"max_turns": self.max_turns, "max_new_tokens": self.max_new_tokens,
                                              "run_dir": record["output"]}})
        return quote, enforce_cap(quote, 1, hours, self.cap)

    @property
    def max_new_tokens(self) -> int:
        return int(self.decoding.get("max_new_tokens") or DEFAULT_MAX_NEW_TOKENS)

    def _hosted_model(self) -> str | None:
        info = self.base_model
        return info.get("id") or info.get("path") if info.get("source") in ("hub", "local") else None

    def open(self) -> "ChatSession":
        """Quote, refuse above the cap, clean up a leftover, create (or attach), and wait until it answers."""
        self.quoted, self.worst_case = self.quote()  # nothing exists yet when this refuses
        try:
            self._exit.enter_context(state.run_lock(self.session_id, timeout=2.0))
        except StatesetError:
            raise StatesetError(f"a chat session with run {self.run_id} is open in another process") from None
        try:
            self._clear_leftover()
            rate = float(self.quoted["usd_per_gpu_hour"])
            # the kernel's view of the deadline until the provider reports the one it enforces
            self.dog = Watchdog(self.provider, self.session_id, self.cap, self.clock() + self.max_minutes * 60, rate,
                                clock=self.clock, sleep=self.sleep, poll_s=self.poll_s, on_tick=self.on_tick,
                                reserve_usd=float(self.quoted.get("turn_usd") or 0.0))
            state.save_record({"run_id": self.session_id, "kind": "chat", "source_run_id": self.run_id,
                               "provider": self.provider_name, "provider_config": dict(self.provider.config or {}),
                               "max_cost_usd": self.cap, "rate_per_hour": rate, "phase": "opening",
                               "quote": self.quoted, "worst_case_usd": self.worst_case})
            self.job = dict(self.provider.chat_open({
                "session_id": self.session_id, "run_id": self.run_id, "quote": self.quoted, "image": self.image,
                "max_minutes": self.max_minutes, "adapter": self.listing, "base_model": self._hosted_model(),
                "max_new_tokens": self.max_new_tokens, "storage_gb": STORAGE_GB}))
            state.update_record(self.session_id, job=self.job, phase="open")
            self.dog.deadline_at = min(self.dog.deadline_at, float(self.job["deadline_at"]))
            self._wait_ready()
            if self.watch:
                self._thread = threading.Thread(target=self._watch, daemon=True, name="chat-watchdog")
                self._thread.start()
        except KeyboardInterrupt:
            self.close("interrupted")
            raise
        except BaseException:
            self.close("failed")
            raise
        return self

    def _clear_leftover(self) -> None:
        leftover = self.provider.status(self.session_id)
        if leftover.get("state") in FINAL_STATES:
            return
        self.provider.terminate(self.session_id)
        rate = float(leftover.get("cost_per_hour") or 0.0)
        spend = max(float(leftover.get("spend_usd") or 0.0), rate * float(leftover.get("uptime_s") or 0.0) / 3600)
        old = state.load_record(self.session_id) or {}
        if old.get("phase") not in state.FINAL_PHASES:
            state.append_ledger({"run_id": self.run_id, "session_id": self.session_id, "kind": "chat",
                                 "provider": self.provider_name, "job_id": leftover.get("job_id"),
                                 "spend_usd": round(spend, 6), "max_cost_usd": old.get("max_cost_usd"),
                                 "outcome": "abandoned", "message": "a crashed session's resource was still live"})

    def _wait_ready(self) -> None:
        while True:
            self._check()
            if self.dog.history and self.dog.history[-1].get("ready"):
                return
            self.sleep(self.poll_s)

    # ------------------------------------------------------------------------------------------------ watching
    def _check(self) -> None:
        """One watchdog poll; raises SessionEnded when the session is (or now gets) ended."""
        with self._lock:
            if self.final is None:
                final = self.dog.check()
                if final is not None:
                    self.final = final
                    state.update_record(self.session_id, phase="ending", final=final)
            if self.final is not None:
                raise SessionEnded(self._why(), self._outcome())

    def _why(self) -> str:
        final = self.final or {}
        stopped = final.get("stopped_by")
        spent = f"spent ${self.spend:.4f} of ${self.cap:.2f}"
        if stopped == "cap":
            return f"the chat session was ended before the --max-cost cap; {spent}"
        if stopped == "deadline":
            return f"the chat session reached its --max-minutes limit; {spent}"
        if stopped == "turns":
            return f"the chat session reached its --max-turns limit ({self.max_turns}); {spent}"
        return f"the chat session's resource ended ({final.get('state')}: {final.get('message') or ''}); {spent}"

    def _outcome(self) -> str:
        stopped = (self.final or {}).get("stopped_by")
        return {"cap": "capped", "deadline": "deadline", "turns": "turn_limit"}.get(stopped, "failed")

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._check()
            except SessionEnded:
                return
            except Exception:  # noqa: BLE001 - a failed poll is retried; the remote deadline still holds
                continue

    @property
    def spend(self) -> float:
        return self.dog.spend if self.dog else 0.0

    # --------------------------------------------------------------------------------------------------- turns
    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """One turn (the chat evaluator's request and events): checked against the cap before and after."""
        if self.turns >= self.max_turns:
            with self._lock:
                if self.final is None:
                    self.provider.terminate(self.session_id)
                    self.final = {"state": "terminated", "stopped_by": "turns"}
        self._check()
        turn = {k: v for k, v in {**self.decoding, **dict(request)}.items() if v is not None}
        turn.update(session_id=self.session_id, max_new_tokens=self.max_new_tokens)
        try:
            event = dict(self.provider.chat_turn(turn))
        except Exception as exc:  # noqa: BLE001 - ended underneath us, or a failed turn the loop reports
            with self._lock:  # a watchdog terminating the session right now has set `final` once this is free
                ended = self.final is not None
            if ended:
                raise SessionEnded(self._why(), self._outcome()) from None
            event = {"type": "failed", "reason": type(exc).__name__, "message": str(exc)}
        self.turns += 1
        with contextlib.suppress(SessionEnded):  # the reply is shown; the next turn reports the end
            self._check()
        yield event

    # ------------------------------------------------------------------------------------------------- closing
    def close(self, outcome: str) -> dict[str, Any]:
        """Terminate the resource and book the spend (kind `chat`). Safe to call twice."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_s + 5)
        record = state.load_record(self.session_id) or {}
        if record.get("phase") in state.FINAL_PHASES:
            self._exit.close()
            return record
        try:
            if self.final is not None:
                outcome = self._outcome()
            if not record:  # refused or failed before anything could be created
                return record
            with contextlib.suppress(Exception):  # the last view before it goes (a gone job: nothing)
                self.dog.accrue(self.provider.status(self.session_id))
            self.provider.terminate(self.session_id)  # the job may be gone already: terminate is idempotent
            self.dog.accrue(self.provider.status(self.session_id))  # usage-billed providers report the bill now
            spend = round(self.spend, 6)
            state.append_ledger({"run_id": self.run_id, "session_id": self.session_id, "kind": "chat",
                                 "provider": self.provider_name, "job_id": self.job.get("job_id"),
                                 "spend_usd": spend, "max_cost_usd": self.cap, "outcome": outcome,
                                 "turns": self.turns, "message": self._why() if self.final else None})
            phase = outcome if outcome in state.FINAL_PHASES else "closed"
            return state.update_record(self.session_id, phase=phase, spend_usd=spend, turns=self.turns)
        finally:
            self._exit.close()
