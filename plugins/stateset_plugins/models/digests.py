"""Tensors as a .safetensors file stores them, for `plugin_api.checkpoints.tensors_digest` (the receipts' update
digest equals the saved adapter file's)."""
from __future__ import annotations

import torch

_SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
                       torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def entries(tensors: dict[str, torch.Tensor]) -> list[tuple[str, str, list[int], bytes]]:
    """(name, safetensors dtype, shape, raw bytes) of each tensor, as a .safetensors file stores it."""
    out = []
    for name, t in tensors.items():
        t = t.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        out.append((name, _SAFETENSORS_DTYPES[t.dtype], list(t.shape), raw))
    return out
