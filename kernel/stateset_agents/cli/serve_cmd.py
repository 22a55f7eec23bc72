"""`stateset-agents serve`: the gateway over a deploy registry. The work is `gateway.server`; this parses and
prints. FastAPI, uvicorn and torch load inside the command body, so `--help` stays fast."""
from __future__ import annotations

from typing import Optional

import typer

from .app import app, console, err_console


@app.command()
def serve(
    registry: Optional[str] = typer.Option(None, "--registry", help="The deploy registry: its entries are served "
                                                                    "by name; its state database holds the API keys "
                                                                    "(`keys create`)."),
    base_model: Optional[str] = typer.Option(None, "--base-model", help="The base model (default: the one the "
                                                                        "deployed adapters trained on, else the "
                                                                        "offline default)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; a non-loopback address needs keys."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    capture: Optional[str] = typer.Option(None, "--capture", help="Directory to append served conversations to, "
                                                                  "in ingest's call-log format."),
    capture_raw: bool = typer.Option(False, "--capture-raw", help="Capture without redacting personal data."),
    capture_max_mb: int = typer.Option(64, "--capture-max-mb", help="Start a new capture file past this size."),
    max_batch: int = typer.Option(8, "--max-batch", help="Rows decoded together."),
    queue_size: int = typer.Option(64, "--queue-size", help="Rows that may wait beyond the batch (then 429)."),
    max_prompt_tokens: int = typer.Option(2048, "--max-prompt-tokens", help="Longest prompt accepted (else 400)."),
    max_new_tokens: int = typer.Option(1024, "--max-new-tokens", help="Most tokens a request may ask for."),
    generation_timeout: float = typer.Option(300.0, "--generation-timeout", help="Seconds a request may generate."),
    max_body_kb: int = typer.Option(1024, "--max-body-kb", help="Largest request body (else 413)."),
    rate_limit: int = typer.Option(600, "--rate-limit", help="Requests a minute per key (a key may set its own)."),
    cors_origin: list[str] = typer.Option([], "--cors-origin", help="Allow browser calls from this origin "
                                                                    "(repeatable; CORS is off without it)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="Serving engine (a plugin's; default: the only "
                                                                "one installed)."),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto."),
    database: Optional[str] = typer.Option(None, "--database", help="State database for agents, conversations "
                                                                    "and jobs: sqlite:///PATH or postgresql://... "
                                                                    "(default: REGISTRY/.gateway.sqlite3)."),
    jobs_dir: Optional[str] = typer.Option(None, "--jobs-dir", help="Where training jobs' runs go (default: "
                                                                    "REGISTRY/.jobs)."),
    root: list[str] = typer.Option([], "--root", help="A folder clients may name files in (a job's dataset, a "
                                                      "reward's config; repeatable; default: the working "
                                                      "directory). Anything outside is refused (400)."),
):
    """Serve the base model and every deployed adapter over OpenAI- (/v1/chat/completions) and Anthropic-
    compatible (/v1/messages) endpoints."""
    from ..gateway.server import Options, build, serve as run

    options = Options(registry=registry, base_model=base_model, host=host, port=port, capture=capture,
                      capture_raw=capture_raw, capture_max_bytes=capture_max_mb << 20, engine=engine,
                      engine_config={"max_batch": max_batch, "queue_size": queue_size,
                                     "max_prompt_tokens": max_prompt_tokens, "max_new_tokens": max_new_tokens,
                                     "generation_timeout_s": generation_timeout, "device": device},
                      max_body_bytes=max_body_kb << 10, rate_limit=rate_limit, cors_origins=tuple(cors_origin),
                      database=database, jobs_dir=jobs_dir, roots=tuple(root))
    gateway = build(options)
    models = [m["id"] for m in gateway.engine.models()]
    console.print(f"serving {', '.join(models)} on http://{host}:{port}/v1 ({gateway.keys} API keys)",
                  highlight=False)
    for name, why in gateway.skipped.items():
        err_console.print(f"[yellow]not serving {name}:[/] {why}", highlight=False)
    for note in gateway.notes:
        (err_console if "RAW" in note or "no API keys" in note else console).print(note, highlight=False)
    run(gateway, host, port)
