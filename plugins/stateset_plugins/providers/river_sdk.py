"""The one module that touches `river_client` (Python 3.12+, so it loads only in the `river` image).

These are the calls the engine's hosted backend makes on River: a session tagged with the run id, a LoRA model on
a hosted base model, sampling, forward-backward, optimizer steps, checkpoints. Every function takes the SDK module
as `sdk` so a test can record the calls and check them against the real client's signatures (read from its
wheel's source, since the client cannot be imported on 3.11).
"""
from __future__ import annotations

from typing import Any


def _river(sdk=None):
    if sdk is not None:
        return sdk
    import river_client

    return river_client


def connect(api_key: str, endpoint: str, sdk=None) -> Any:
    return _river(sdk).Client(api_key=api_key, endpoint=endpoint)


def health(client: Any) -> Any:
    return client.health_check()


def open_session(client: Any, run_id: str) -> Any:
    """A session context tagged with the run id (River lists and bills by tag)."""
    return client.session(stateset_run_id=run_id)


def create_model(session: Any, base_model: str, lora_rank: int, sdk=None) -> Any:
    return session.create_model(base_model=base_model, lora=_river(sdk).LoraConfig(rank=lora_rank))


def sample(model: Any, prompts: list[str], *, num_samples: int, max_tokens: int, temperature: float,
           seed: int | None) -> Any:
    return model.sample(prompts, num_samples=num_samples, max_tokens=max_tokens, temperature=temperature, seed=seed,
                        logprobs=0)


def forward_backward(model: Any, data: list[dict], loss_fn: str) -> Any:
    return model.forward_backward(data, loss_fn=loss_fn, return_logprobs=True)


def optim_step(model: Any, lr: float, grad_clip_norm: float | None, idempotency_key: str) -> Any:
    return model.optim_step(lr=lr, grad_clip_norm=grad_clip_norm, idempotency_key=idempotency_key)


def save(model: Any, name: str) -> Any:
    return model.save_weights(name, mode="training")


def close(client: Any) -> None:
    client.close()
