"""GET /metrics: Prometheus metrics (prometheus-client), in a registry of the app's own (two gateways in one
process, as in the tests, never share counters).

- ``gateway_requests_total{method, route, status}`` and ``gateway_request_seconds{method, route}`` (to the
  response's start: a stream's time to headers); the route is the template (``/agents/{agent_id}``), never the path.
- ``gateway_tokens_total{kind="prompt"|"completion", model}``: from every served reply's usage.
- ``gateway_queue_depth`` / ``gateway_active_rows``: the engine's waiting and decoding rows, read at scrape time.
- ``gateway_jobs{state}``: training jobs by state, read from the database at scrape time.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from fastapi import FastAPI, Request, Response


def install(app: FastAPI, *, stats: Callable[[], dict[str, Any]], job_counts: Callable[[], dict[str, int]] | None,
            authorize: Callable) -> Callable[[str, dict[str, Any]], None]:
    """Add the middleware and the route; returns `tokens(model, usage)` for the routes to count with."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
    from prometheus_client.core import GaugeMetricFamily

    registry = CollectorRegistry()
    requests = Counter("gateway_requests", "HTTP requests answered", ["method", "route", "status"],
                       registry=registry)
    latency = Histogram("gateway_request_seconds", "Seconds to the response's start", ["method", "route"],
                        registry=registry, buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60))
    tokens = Counter("gateway_tokens", "Tokens served", ["kind", "model"], registry=registry)

    class Live:
        def collect(self):
            engine = stats()
            depth = GaugeMetricFamily("gateway_queue_depth", "Rows waiting for the engine")
            depth.add_metric([], float(engine.get("queued", engine.get("queue_depth", 0)) or 0))
            yield depth
            active = GaugeMetricFamily("gateway_active_rows", "Rows the engine is decoding")
            active.add_metric([], float(engine.get("active", engine.get("running", 0)) or 0))
            yield active
            if job_counts is not None:
                jobs = GaugeMetricFamily("gateway_jobs", "Training jobs by state", labels=["state"])
                for state, n in job_counts().items():
                    jobs.add_metric([state], float(n))
                yield jobs

    registry.register(Live())

    class Measure:  # plain ASGI (not BaseHTTPMiddleware): streams pass through untouched
        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.inner(scope, receive, send)
            started = time.perf_counter()
            seen = {"status": 500}

            async def sending(message):
                if message["type"] == "http.response.start":
                    seen["status"] = message["status"]
                    route = getattr(scope.get("route"), "path", None) or "(unrouted)"
                    latency.labels(scope["method"], route).observe(time.perf_counter() - started)
                await send(message)

            try:
                await self.inner(scope, receive, sending)
            finally:
                route = getattr(scope.get("route"), "path", None) or "(unrouted)"
                requests.labels(scope["method"], route, str(seen["status"])).inc()

    app.add_middleware(Measure)

    @app.get("/metrics")
    async def metrics(request: Request):
        authorize(request, admin=True)
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    def count(model: str, usage: dict[str, Any]) -> None:
        tokens.labels("prompt", model).inc(int(usage.get("prompt_tokens") or 0))
        tokens.labels("completion", model).inc(int(usage.get("completion_tokens") or 0))

    return count
