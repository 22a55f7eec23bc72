"""Soak: the gateway under bench_gateway.py's load for N minutes, on loopback, its memory sampled.

`stateset-agents serve` runs as a child process as a deployment would: a registry with an API key (so every request
goes through the key lookup in the state database), capture on (redacted, indexed). C async `openai` clients
(default 8, the benchmark's top level) each stream chat completions back to back, each generating exactly
`--max-tokens` tokens (greedy, ``ignore_eos``), on bench_gateway's prompts, until the time is up. The server's RSS
(/proc/PID/status VmRSS) is sampled every second.

"Flat": after the warm-up (the later of `--warmup-s`, default 60, and the end of the first 2 x C requests: the first
full batches grow caches and allocator pools), the median RSS of the last tenth of the samples exceeds that of the
first tenth by at most `--max-growth-mb` (default 16 MiB); a soak too short to pass its warm-up is not flat. The slope (least squares, MiB a minute, after warm-up) is reported beside it. Exit status 1 when any
request failed or RSS is not flat.

    python benchmarks/soak_gateway.py [--minutes 10] [--base-model M] [--clients 8] [--max-tokens 64]

Results: benchmarks/results/soak_gateway.json (written atomically), and a summary.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_gateway import PROMPTS, free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "soak_gateway.json"
MIB = 1 << 20


def rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def start_server(work: Path, base_model: str | None, port: int, clients: int, max_tokens: int
                 ) -> tuple[subprocess.Popen, str]:
    """serve over a fresh registry holding one key; (the process, the key)."""
    import httpx

    from stateset_agents.gateway.keys import create_key  # what `keys create` calls, without a second start-up

    registry = work / "registry"
    env = {**os.environ, "STATESET_AGENTS_STATE_DIR": str(work / "state")}
    key = create_key(registry, "soak", "infer")[0]
    args = [sys.executable, "-m", "stateset_agents", "serve", "--registry", str(registry), "--host", "127.0.0.1",
            "--port", str(port), "--max-batch", str(clients), "--max-new-tokens", str(max(max_tokens, 16)),
            "--queue-size", "256", "--capture", str(work / "capture"), "--rate-limit", "1000000"]
    if base_model:
        args += ["--base-model", base_model]
    log = open(work / "serve.log", "ab")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited: {(work / 'serve.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc, key
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("serve did not become ready")


async def load(url: str, key: str, model: str, clients: int, max_tokens: int, until: float) -> dict:
    """bench_gateway's streaming load, back to back until `until`; every request counted, every failure kept."""
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=600)
    counts = {"requests": 0, "errors": 0, "tokens": 0}
    failures: list[str] = []
    done_at: list[float] = []  # when each request ended (monotonic)

    async def one(k: int) -> None:
        r = 0
        while time.monotonic() < until:
            counts["requests"] += 1
            try:
                stream = await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": PROMPTS[(k + r) % len(PROMPTS)]}],
                    max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True})
                tokens = 0
                async for chunk in stream:
                    if chunk.usage:
                        tokens = chunk.usage.completion_tokens
                if tokens != max_tokens:
                    raise RuntimeError(f"{tokens} tokens generated, {max_tokens} asked for")
                counts["tokens"] += tokens
                done_at.append(time.monotonic())
            except Exception as exc:  # counted and kept: the soak reports every failure, it does not stop
                counts["errors"] += 1
                if len(failures) < 20:
                    failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            r += 1

    await asyncio.gather(*(one(k) for k in range(clients)))
    await client.close()
    return {**counts, "failures": failures, "done_at": done_at}


def slope_per_minute(samples: list[tuple[float, int]]) -> float:
    if len(samples) < 2:
        return 0.0
    ts = [t for t, _ in samples]
    ys = [v / MIB for _, v in samples]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return 60.0 * sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var if var else 0.0


def summarize(samples: list[tuple[float, int]], warmup_s: float, max_growth_mb: float) -> dict:
    after = [(t, v) for t, v in samples if t >= warmup_s]
    if len(after) < 10:  # nothing after the warm-up to judge: not flat, and said so
        return {"rss_start_mib": samples[0][1] / MIB, "rss_end_mib": samples[-1][1] / MIB,
                "rss_max_mib": max(v for _, v in samples) / MIB, "rss_after_warmup_mib": None,
                "growth_after_warmup_mib": None, "slope_mib_per_min": None, "samples": len(samples),
                "warmup_end_s": warmup_s, "flat": False}
    tenth = max(1, len(after) // 10)
    first = statistics.median(v for _, v in after[:tenth])
    last = statistics.median(v for _, v in after[-tenth:])
    growth = (last - first) / MIB
    return {"rss_start_mib": samples[0][1] / MIB, "rss_end_mib": samples[-1][1] / MIB,
            "rss_max_mib": max(v for _, v in samples) / MIB, "rss_after_warmup_mib": first / MIB,
            "growth_after_warmup_mib": growth, "slope_mib_per_min": slope_per_minute(after),
            "samples": len(samples), "warmup_end_s": warmup_s, "flat": growth <= max_growth_mb}


def write_atomically(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--base-model", default=None, help="default: the offline SmolLM2-135M-Instruct")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--max-growth-mb", type=float, default=16.0)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    import httpx

    with tempfile.TemporaryDirectory(prefix="soak-gateway-") as work:
        port = free_port()
        server, key = start_server(Path(work), args.base_model, port, args.clients, args.max_tokens)
        samples: list[tuple[float, int]] = []
        stop = threading.Event()
        try:
            url = f"http://127.0.0.1:{port}"
            model = httpx.get(url + "/v1/models", headers={"x-api-key": key}).json()["data"][0]["id"]
            started = time.monotonic()

            def sample() -> None:
                while not stop.is_set():
                    value = rss(server.pid)
                    if value is not None:
                        samples.append((time.monotonic() - started, value))
                    stop.wait(1.0)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            result = asyncio.run(load(url, key, model, args.clients, args.max_tokens,
                                      started + args.minutes * 60.0))
            elapsed = time.monotonic() - started
            stop.set()
            sampler.join(5)
            alive = server.poll() is None
        finally:
            stop.set()
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
    if not samples:
        raise SystemExit("no RSS sample of the server was taken")
    batches = sorted(t - started for t in result.pop("done_at"))
    warm = 2 * args.clients  # the warm-up ends with the first 2 x C requests, and not before --warmup-s
    warmup_end = max(args.warmup_s, batches[warm - 1] if len(batches) >= warm else float("inf"))
    memory = summarize(samples, warmup_end, args.max_growth_mb)
    ok = result["errors"] == 0 and memory["flat"] and alive
    out = {"benchmark": "soak_gateway", "minutes": args.minutes, "seconds": elapsed,
           "base_model": args.base_model or "SmolLM2-135M-Instruct (offline default)", "clients": args.clients,
           "max_tokens": args.max_tokens, "warmup_s": args.warmup_s,
           "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "max_growth_mib": args.max_growth_mb,
           "requests": result["requests"], "errors": result["errors"], "failures": result["failures"],
           "tokens": result["tokens"], "requests_per_s": result["requests"] / elapsed, "server_alive": alive,
           **memory, "ok": ok, "rss_series": [[round(t, 1), round(v / MIB, 2)] for t, v in samples],
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}}
    write_atomically(Path(args.output), out)
    print(f"requests {out['requests']} ({out['requests_per_s']:.2f}/s), errors {out['errors']}, "
          f"{out['seconds']:.0f} s, {args.clients} clients x {args.max_tokens} tokens")
    growth = ("no samples after it" if memory["growth_after_warmup_mib"] is None else
              f"growth {memory['growth_after_warmup_mib']:+.1f} MiB (flat <= {args.max_growth_mb:.0f}), slope "
              f"{memory['slope_mib_per_min']:+.2f} MiB/min")
    print(f"RSS start {memory['rss_start_mib']:.1f} MiB, end {memory['rss_end_mib']:.1f}, max "
          f"{memory['rss_max_mib']:.1f}; after the {min(warmup_end, elapsed):.0f} s warm-up: {growth}")
    print(("FLAT, no errors" if ok else "NOT OK: " + ", ".join(
        w for w, bad in (("errors", result["errors"]), ("RSS grew", not memory["flat"]),
                         ("the server died", not alive)) if bad)) + f"; wrote {args.output}")
    for failure in result["failures"][:5]:
        print("  " + failure)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
