"""The one module that touches `river_client` (Python 3.12+, so it loads only in the `river` image).

These are the calls the engine's hosted backend (`backend`) and the provider (`provider`) make on River: a session
tagged with the run id, a LoRA model on a hosted base model, sampling (from the live weights or the base model),
forward and forward-backward passes, optimizer steps, checkpoints and their download. Every function returns plain
Python values (lists, dicts, str), so nothing above this module sees a River type, and reports the token usage River
returned, which is what River bills. Every function takes the SDK module as `sdk` where it needs one, so a test can
record the calls and check them against the real client's signatures (read from its wheel's source, since the client
cannot be imported on 3.11).
"""
from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import Any

#: River's client 0.16 has no checkpoint-download call (its own docs send you to the per-checkpoint download script
#: River Console generates; `river_client.hf_export` only converts files already downloaded), so the files are
#: fetched over HTTPS from the URL template that script uses ("{path}" and "{file}" filled in). Nothing is guessed.
#: Chat does not need it: River samples the checkpoint where it is (`sample_checkpoint`).
DOWNLOAD_URL_ENV = "STATESET_RIVER_DOWNLOAD_URL"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def _river(sdk=None):
    if sdk is not None:
        return sdk
    import river_client

    return river_client


def connect(api_key: str, endpoint: str, sdk=None) -> Any:
    return _river(sdk).Client(api_key=api_key, endpoint=endpoint)


def health(client: Any) -> Any:
    return client.health_check()


def open_session(client: Any, run_id: str) -> tuple[Any, Any]:
    """(context, session): a session tagged with the run id (River lists and bills by tag). Closing the context
    unloads the models and stops the heartbeat, which is what ends River's billing for it."""
    context = client.session(stateset_run_id=run_id, run=run_id)
    return context, context.__enter__()


def close_session(context: Any) -> None:
    context.__exit__(None, None, None)


def create_model(session: Any, base_model: str, lora_rank: int, seed: int | None = None, sdk=None) -> Any:
    return session.create_model(base_model=base_model, lora=_river(sdk).LoraConfig(rank=lora_rank, seed=seed))


def _samples(groups: Any, prompt_ids: list[list[int]]) -> tuple[list[list[dict[str, Any]]], dict[str, int]]:
    out, tokens = [], 0
    for group, prompt in zip(groups, prompt_ids):
        row = []
        for s in group:
            row.append({"tokens": [int(t) for t in s.tokens], "logprobs": [float(x) for x in s.logprobs],
                        "stop_reason": s.stop_reason})
            # the prompt is billed for every sample; a Sample that does not count it is charged what was sent
            tokens += len(s.tokens) + int(getattr(s, "prompt_tokens", None) or len(prompt))
        out.append(row)
    return out, {"sample_tokens": tokens}


def sample(model: Any, prompt_ids: list[list[int]], *, num_samples: int, max_tokens: int, temperature: float,
           seed: int | None) -> tuple[list[list[dict[str, Any]]], dict[str, int]]:
    """Sample from the live training weights; per prompt, `num_samples` of {tokens, logprobs, stop_reason}."""
    groups = model.sample(prompt_token_ids=prompt_ids, num_samples=num_samples, max_tokens=max_tokens,
                          temperature=temperature, seed=seed)
    return _samples(groups, prompt_ids)


def sample_base(session: Any, base_model: str, prompt_ids: list[list[int]], *, max_tokens: int, temperature: float,
                seed: int | None) -> tuple[list[list[dict[str, Any]]], dict[str, int]]:
    """Sample from the hosted base model itself (the adapter-off answers of the held-out evaluation)."""
    groups = session.sample(prompt_token_ids=prompt_ids, base_model=base_model, num_samples=1,
                            max_tokens=max_tokens, temperature=temperature, seed=seed)
    return _samples(groups, prompt_ids)


def sample_checkpoint(session: Any, base_model: str, checkpoint: str, prompt_ids: list[list[int]], *,
                      max_tokens: int, temperature: float, seed: int | None
                      ) -> tuple[list[list[dict[str, Any]]], dict[str, int]]:
    """Sample from a saved (inference) checkpoint: River loads its LoRA, generates, and unloads it (chat)."""
    groups = session.sample(prompt_token_ids=prompt_ids, base_model=base_model, checkpoint=checkpoint,
                            num_samples=1, max_tokens=max_tokens, temperature=temperature, seed=seed)
    return _samples(groups, prompt_ids)


def _usage(result: Any, data: list[dict]) -> dict[str, int]:
    metrics = dict(result.metrics or {})
    reported = metrics.get("num_tokens", metrics.get("tokens"))
    # River's metrics name the tokens it trained on; without them, count what was sent (what it bills)
    tokens = int(reported) if reported is not None else sum(len(d["input_ids"]) for d in data)
    return {"train_tokens": tokens}


def forward(model: Any, data: list[dict]) -> tuple[list[list[float]], dict[str, int]]:
    """Per-datum log-probs at prediction positions (index i: log p(input_ids[i + 1])), no gradients."""
    result = model.forward(data, loss_fn="cross_entropy")
    return [[float(x) for x in row] for row in (result.logprobs or [])], _usage(result, data)


def forward_backward(model: Any, data: list[dict], loss_fn: str) -> tuple[dict[str, float], dict[str, int]]:
    result = model.forward_backward(data, loss_fn=loss_fn)
    return {k: float(v) for k, v in (result.metrics or {}).items()}, _usage(result, data)


def optim_step(model: Any, lr: float, grad_clip_norm: float | None, weight_decay: float,
               idempotency_key: str) -> dict[str, float]:
    result = model.optim_step(lr=lr, weight_decay=weight_decay, grad_clip_norm=grad_clip_norm,
                              idempotency_key=idempotency_key)
    return {k: float(v) for k, v in (result.metrics or {}).items()}


def save(model: Any, name: str, mode: str = "training") -> str:
    """Save on River; returns the checkpoint's river:// path ("training": with optimizer; "inference": PEFT)."""
    return model.save_weights(name, mode=mode).path


def load(model: Any, path: str) -> None:
    model.load_weights(path, load_optimizer=True)


def download_checkpoint(api_key: str, path: str, directory: Path) -> None:
    """Fetch an inference (PEFT) checkpoint's files into `directory`."""
    template = os.environ.get(DOWNLOAD_URL_ENV)
    if not template:
        from stateset_agents.core.errors import InputError

        raise InputError(f"{DOWNLOAD_URL_ENV} is not set: river-client has no download call; set it to the "
                         "checkpoint URL template from River Console's download script", field=DOWNLOAD_URL_ENV)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ADAPTER_FILES:
        req = urllib.request.Request(template.format(path=path, file=name),
                                     headers={"Authorization": f"Bearer {api_key}"})
        with urllib.request.urlopen(req, timeout=300) as resp, open(directory / name, "wb") as f:
            while chunk := resp.read(1 << 20):
                f.write(chunk)


def close(client: Any) -> None:
    client.close()
