"""Peak memory of one VAPO update for a randomly initialised 1B-parameter Llama-shaped model (TinyLlama-1.1B's
shape) with LoRA in bf16, on CPU, measured in a child process (peak RSS: VmHWM, reset after the model is built,
and ru_maxrss), next to the arithmetic docs/algorithms.md states. Not a test: it needs ~8 GB and a few minutes.

    python benchmarks/vapo_memory.py [--group 4] [--prompt 64] [--completion 128]
    (writes benchmarks/results/vapo_memory.json)

One update = what the engine does for VAPO after the rollout: the value head's no-grad pass (`prepare`, GAE), one
forward-backward of the VAPO loss (policy + positive NLL + value) and one optimizer step of LoRA and value head.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
         "num_attention_heads": 32, "num_key_value_heads": 4}


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def arithmetic(group: int, prompt: int, completion: int, lora_params: int, weights: int) -> dict[str, float]:
    """The estimate docs/algorithms.md writes out (bytes -> MB)."""
    h, i, kv, v, layers = (SHAPE[k] for k in ("hidden_size", "intermediate_size", "num_key_value_heads",
                                                "vocab_size", "num_hidden_layers"))
    kv = kv * h // SHAPE["num_attention_heads"]
    tokens = group * (prompt + completion)
    # saved for backward, per token and layer: bf16 tensors (norm outputs, q/k/v/o, rotated q/k, attention output,
    # gate/up/act/product of the MLP) + fp32 tensors (the two RMSNorm inputs, and PEFT's fp32 copy of the input of
    # each of the 7 LoRA-wrapped linears: 6 of width h, down_proj's of width i)
    per_token_layer = 2 * (4 * h + 3 * kv + 4 * i) + 4 * (2 * h + 6 * h + i)
    activations = tokens * layers * per_token_layer
    logits = group * (completion + 1) * v * (2 + 4 + 4)  # bf16 logits, their fp32 copy, fp32 logsumexp workspace
    lora = lora_params * 4 * 4  # fp32 weights, grads, Adam m and v
    mb = 1024 ** 2
    parts = {"weights_bf16": weights * 2 / mb, "lora_and_adam_fp32": lora / mb, "activations": activations / mb,
             "logits": logits / mb, "value_head": (h + 1) * 4 * 4 / mb}
    parts["total"] = sum(parts.values())
    return parts


def measure(group: int, prompt: int, completion: int, queue) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(2)
    from stateset_plugins.models.backend import LocalTorchBackend
    from stateset_plugins.models.batch import Sample, collate
    from stateset_plugins.trainers.objectives import get_objective

    start = rss_mb()
    config = LlamaConfig(**SHAPE, max_position_embeddings=2048, tie_word_embeddings=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16).to_empty(device="cpu")  # bf16 on meta first: no fp32 copy ever exists
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)  # its buffers are computed, not loaded
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)  # random weights: memory, not quality, is measured
    weights = sum(p.numel() for p in model.parameters())

    class Tok:  # the backend needs only pad/eos ids from a tokenizer
        pad_token_id, eos_token_id = 0, 2

    obj = get_objective("vapo")
    cfg = obj.Config(num_generations=group, max_new_tokens=completion, value_pretrain_steps=0)
    torch.manual_seed(0)
    backend = LocalTorchBackend(model, Tok(), cfg, value_head=True)
    lora_params = sum(p.numel() for p in backend.model.parameters() if p.requires_grad)
    lora_dtype = str(next(p for p in backend.model.parameters() if p.requires_grad).dtype)
    g = torch.Generator().manual_seed(0)
    samples = [Sample(f"s{k}", "p", torch.randint(3, 32000, (prompt,), generator=g).tolist(),
                      torch.randint(3, 32000, (completion,), generator=g).tolist(), [True] * completion,
                      [-1.0] * completion) for k in range(group)]
    batch = collate(samples, 0, group)
    batch.rewards = torch.tensor([1.0, 0.0] * (group // 2))
    batch.advantages = obj.advantages(batch.rewards, group, cfg)
    before = rss_mb()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak mark restarts here: what follows is the update
    t0 = time.perf_counter()
    obj.prepare(batch, backend, cfg)
    stats = backend.forward_backward(batch, lambda new, b, v: obj.loss(new, b, cfg, v), temperature=1.0,
                                     values=True)
    stats.update(backend.optimizer_step())
    elapsed = time.perf_counter() - t0
    queue.put({"group": group, "prompt": prompt, "completion": completion, "tokens": group * (prompt + completion),
               "weights": weights, "lora_params": lora_params, "lora_dtype": lora_dtype,
               "rss_process_start_mb": start, "rss_before_update_mb": before,
               "peak_rss_update_mb": rss_mb("VmHWM"), "ru_maxrss_mb": resource.getrusage(
                   resource.RUSAGE_SELF).ru_maxrss / 1024, "update_seconds": elapsed,
               "loss": stats["loss"], "torch": torch.__version__})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=128)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this process in its RSS
    queue = ctx.Queue()
    proc = ctx.Process(target=measure, args=(args.group, args.prompt, args.completion, queue))
    proc.start()
    result = queue.get()
    proc.join()
    est = arithmetic(args.group, args.prompt, args.completion, result["lora_params"], result["weights"])
    # measured: the process's peak during the update minus what it held before loading anything but the model
    measured = result["peak_rss_update_mb"] - result["rss_process_start_mb"]
    result.update(arithmetic_mb=est, measured_mb=measured, ratio=measured / est["total"])
    out = ROOT / "benchmarks" / "results" / "vapo_memory.json"
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
