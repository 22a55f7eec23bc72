"""Memory options of the local backend: gradient checkpointing (``gradient_checkpointing`` in the config), and
handing freed memory back to the system (``release_freed_memory``).

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


#: glibc's mallopt parameters (malloc.h) and the threshold both are fixed at
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
RELEASE_THRESHOLD = 64 * 1024


def release_freed_memory(config) -> bool:
    """When the config asks: fix glibc's mmap threshold (and trim threshold) at 64 KiB, so every tensor above it
    is its own mapping, returned to the system when freed. By default glibc raises the mmap threshold to the size
    of the largest block it has freed (up to 32 MiB), after which activations come from its heap, and a heap
    whose top block is still in use cannot shrink: the resident size stays at the update's high-water mark plus
    fragmentation. Process-wide and irreversible, which is why it is an option."""
    if not bool(getattr(config, "release_freed_memory", False)):
        return False
    import ctypes
    import platform

    from stateset_agents.core.errors import InputError

    libc_name, _ = platform.libc_ver()
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        mallopt = None
    if libc_name != "glibc" or mallopt is None:
        raise InputError("release_freed_memory needs Linux with glibc (mallopt)", field="release_freed_memory")
    if not (mallopt(M_MMAP_THRESHOLD, RELEASE_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, RELEASE_THRESHOLD)):
        raise InputError("glibc refused mallopt", field="release_freed_memory")
    return True
