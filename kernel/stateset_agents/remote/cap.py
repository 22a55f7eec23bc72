"""The cost cap: the worst case before anything is rented, and the watchdog after.

Worst case = hourly price per GPU (from the provider's API where it has one) x GPUs x max hours + storage.
The watchdog polls the provider, accrues spend from the reported cost and uptime (whichever is higher), and
terminates the job when the spend one poll (plus the time a termination takes) from now would pass the cap less
a safety margin. Clock and sleep are injected so tests run the whole thing in microseconds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..core.errors import InputError, StatesetError

#: states a provider's `status` reports; all but the first two are final ("stopped": a cooperative stop honoured,
#: a checkpoint saved, its artifacts collectable like a finished run's)
STATES = ("pending", "running", "succeeded", "stopped", "failed", "terminated", "missing")
FINAL_STATES = ("succeeded", "stopped", "failed", "terminated", "missing")


class CapExceeded(StatesetError):
    exit_code = 4


def check_cap_value(max_cost: Any) -> float:
    try:
        value = float(max_cost)
    except (TypeError, ValueError):
        raise InputError(f"--max-cost must be a number of USD, got {max_cost!r}", field="max_cost_usd") from None
    if not value > 0 or value != value or value == float("inf"):
        raise InputError(f"--max-cost must be a positive number of USD, got {max_cost!r}", field="max_cost_usd")
    return value


def worst_case(quote: Mapping[str, Any], gpus: int, max_hours: float) -> float:
    if not quote.get("priced"):
        raise CapExceeded(f"{quote.get('provider', 'this provider')} cannot price this job "
                          f"({quote.get('reason', 'no price available')}), so it cannot honour --max-cost; refusing")
    return round(float(quote["usd_per_gpu_hour"]) * gpus * max_hours + float(quote.get("storage_usd") or 0.0)
                 + float(quote.get("fixed_usd") or 0.0), 6)


def describe_quote(quote: Mapping[str, Any], gpus: int, max_hours: float, total: float) -> str:
    return (f"{quote.get('provider')} {quote.get('gpu')} x{gpus}: ${quote['usd_per_gpu_hour']:.4f}/GPU-hour x "
            f"{gpus} x {max_hours:g} h + storage ${float(quote.get('storage_usd') or 0):.4f} = ${total:.2f} worst case "
            f"(price from {quote.get('source')}, quoted {quote.get('quoted_at_iso', quote.get('quoted_at'))})")


def enforce_cap(quote: Mapping[str, Any], gpus: int, max_hours: float, max_cost: float) -> float:
    """The worst case, or CapExceeded (with the quote) when it is above the cap."""
    total = worst_case(quote, gpus, max_hours)
    if total > max_cost:
        raise CapExceeded(f"refusing: the worst case is above --max-cost ${max_cost:.2f}. "
                          f"{describe_quote(quote, gpus, max_hours, total)}. Lower --max-hours or --gpus, "
                          f"pick a cheaper --gpu, or raise --max-cost.")
    return total


@dataclass
class Watchdog:
    provider: Any
    run_id: str
    max_cost: float
    deadline_at: float  # epoch seconds, counted from the job's creation
    rate_per_hour: float  # the quoted rate for the whole job, a floor when the provider reports none
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    poll_s: float = 30.0
    terminate_latency_s: float = 60.0
    margin: float = 0.05  # stop this share of the cap early: prices round and billing lags
    reserve_usd: float = 0.0  # spend that can come before the next poll beyond the rate (a chat turn's worst case)
    on_tick: Callable[[dict[str, Any]], None] | None = None
    spend: float = 0.0
    last_increase: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)

    def accrue(self, status: Mapping[str, Any]) -> float:
        rate = float(status.get("cost_per_hour") or 0.0) or self.rate_per_hour
        by_uptime = rate * float(status.get("uptime_s") or 0.0) / 3600.0
        before = self.spend
        self.spend = max(self.spend, by_uptime, float(status.get("spend_usd") or 0.0))
        self.last_increase = self.spend - before
        return rate

    def check(self) -> dict[str, Any] | None:
        """One poll; returns the final status when the job is over (finished or terminated by us)."""
        status = dict(self.provider.status(self.run_id))
        rate = self.accrue(status)
        status["accrued_usd"] = round(self.spend, 6)
        self.history.append(status)
        if self.on_tick:
            self.on_tick(status)
        if status.get("state") in FINAL_STATES:
            return status
        now = self.clock()
        ahead = rate * (self.poll_s + self.terminate_latency_s) / 3600.0
        # usage-billed providers (River) spend in bursts no hourly rate predicts: the last poll's increase, again
        ahead = max(ahead, self.last_increase * (1.0 + self.terminate_latency_s / self.poll_s)) + self.reserve_usd
        limit = self.max_cost * (1.0 - self.margin)
        reason = ("cap" if self.spend + ahead >= limit else
                  "deadline" if now + self.poll_s >= self.deadline_at else None)
        if reason is None:
            return None
        self.provider.terminate(self.run_id)
        self.spend += rate * self.terminate_latency_s / 3600.0  # billed until it is really gone
        return {**status, "state": "terminated", "stopped_by": reason, "accrued_usd": round(self.spend, 6)}

    def run(self) -> dict[str, Any]:
        while True:
            final = self.check()
            if final is not None:
                return final
            self.sleep(self.poll_s)
