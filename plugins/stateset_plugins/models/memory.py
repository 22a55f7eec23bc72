"""Memory options of the local backend: gradient checkpointing (``gradient_checkpointing`` in the config).

Checkpointing keeps only each decoder layer's input during the forward pass with gradient and recomputes the layer
in backward: the activations alive during an update drop from every layer's to one layer's, for about one more
forward pass of compute. Sampling and the no-gradient scoring passes are unaffected (transformers checkpoints only
when gradients are on, so generation keeps its KV cache).
"""
from __future__ import annotations


def apply_gradient_checkpointing(model, config) -> bool:
    """Turn checkpointing on for `model` (a PEFT model) when the config asks; returns whether it is on."""
    if not bool(getattr(config, "gradient_checkpointing", False)):
        return False
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(base, "supports_gradient_checkpointing", False):
        from stateset_agents.core.errors import InputError

        raise InputError(f"{type(base).__name__} does not support gradient checkpointing",
                         field="gradient_checkpointing")
    # non-reentrant: the frozen embeddings' output needs no requires_grad for the LoRA weights to get gradients
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return True
