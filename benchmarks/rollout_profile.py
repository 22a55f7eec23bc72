"""Where a GRPO rollout's time goes against the bandwidth ceiling: our backend's `generate` at the settings of
benchmarks/bench_grpo_vs_trl.py (SmolLM2-135M, 2 prompts x G 4 = 8 rows, 16 new tokens, sampling at temperature
1, one thread), split into what it cannot avoid and what it adds.

- the ceiling: copy bandwidth / bytes of weights x 8 rows (benchmarks/machine.py), as in the GRPO benchmark;
- the matrix-product floor: every linear layer's weight (and LoRA pair) applied to 8 rows once, timed alone with
  `torch.nn.functional.linear`: what one decoding step costs on this core with no framework around it;
- the prepacked floor: the same products through oneDNN on weights laid out once ahead of time (not what
  generate runs: how much of the gap is the default kernel's);
- the prefill: one forward pass of the distinct prompts but their last tokens, as `generate` runs it;
- the profile: `torch.profiler` over whole `generate` calls, self CPU time per operator, grouped (matrix products,
  attention, elementwise and norms, sampling and the log-prob recorder), and the wall time no operator accounts
  for (Python and transformers' generate loop).

Usage: python benchmarks/rollout_profile.py [--repeats 3] [--threads 1] [--rollout-dtype float32|bfloat16]
Writes benchmarks/results/rollout_profile.json (bfloat16: rollout_profile_bfloat16.json, the ceiling from the bytes
of the bfloat16 copy the sampler reads).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "rollout_profile.json"
GROUPS = {  # operator name fragments -> group; the first match wins
    "matrix products": ("addmm", "aten::mm", "aten::bmm", "matmul", "linear"),
    "attention": ("scaled_dot_product", "attention", "softmax"),
    # multinomial draws one exponential per vocabulary entry and row: aten::exponential_
    "sampling and log-probs": ("multinomial", "exponential", "logsumexp", "gather", "topk", "sort", "cumsum",
                               "argmax"),
    "copies and indexing": ("copy_", "cat", "index", "slice", "select", "to", "empty", "clone", "contiguous",
                            "expand", "view", "reshape", "transpose", "unsqueeze", "stack", "narrow"),
}


def group_of(name: str) -> str:
    for group, fragments in GROUPS.items():
        if any(f in name for f in fragments):
            return group
    return "elementwise, norms, rotary and the rest"


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def decoding_weights(model) -> list:
    """Each distinct weight one decoding step multiplies by: base, LoRA A and B, the LM head."""
    import torch

    weights, seen = [], set()
    for module in model.modules():
        w = getattr(module, "weight", None)
        if isinstance(module, torch.nn.Linear) and w is not None and w.data_ptr() not in seen:
            seen.add(w.data_ptr())
            weights.append(w.detach())
    head = model.get_output_embeddings().weight.detach()
    if head.data_ptr() not in seen:
        weights.append(head)
    return weights


def linear_floor(model, rows: int, repeats: int) -> float:
    """Seconds for one decoding step's matrix products alone: each distinct weight applied once to `rows` rows,
    with `torch.nn.functional.linear` (the kernel generate runs)."""
    import torch

    weights = decoding_weights(model)
    xs = [torch.randn(rows, w.shape[1], dtype=w.dtype) for w in weights]

    def one_step():
        with torch.inference_mode():
            for x, w in zip(xs, weights):
                torch.nn.functional.linear(x, w)

    one_step()
    return median_time(one_step, repeats)


def prepacked_floor(model, rows: int, repeats: int) -> float | None:
    """The same products through oneDNN with each weight reordered once, ahead of time, into the kernel's blocked
    layout for `rows` rows (`torch.ops.mkldnn._reorder_linear_weight`, what torch.compile's CPU freezing uses):
    how much of the gap to the bandwidth ceiling is the default kernel's (which lays the weight out afresh on every
    call). None where this torch has no oneDNN."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return None
    packed = [(torch.ops.mkldnn._reorder_linear_weight(w, rows), w.shape[1], w.dtype) for w in decoding_weights(model)]
    xs = [torch.randn(rows, k, dtype=dtype) for _, k, dtype in packed]

    def one_step():
        with torch.inference_mode():
            for x, (w, _, _) in zip(xs, packed):
                torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")

    one_step()
    return median_time(one_step, repeats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rollout-dtype", default="float32", choices=["float32", "bfloat16"],
                        help="the sampler's precision (bfloat16: `rollout_dtype`'s copy of the weights)")
    args = parser.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    import bench_grpo_vs_trl as bench  # siblings: this directory is sys.path[0]
    import machine
    from stateset_plugins.models.backend import LocalTorchBackend
    from stateset_plugins.models.rendering import ChatRenderer
    from stateset_plugins.trainers.objectives.grpo import GRPOConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    settings = bench.SETTINGS
    model_dir, model_name = bench.smollm2_135m_dir(Path(tempfile.mkdtemp()))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = GRPOConfig(lora_r=settings["lora_r"], lora_alpha=settings["lora_alpha"],
                        max_new_tokens=settings["max_new_tokens"], rollout_dtype=args.rollout_dtype)
    backend = LocalTorchBackend(AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, config)
    renderer = ChatRenderer(tokenizer, 2048)
    g = settings["num_generations"]
    prompts = [renderer.prompt_ids([{"role": "user", "content": p}])
               for p in bench.PROMPTS[:settings["prompts_per_step"]] for _ in range(g)]
    rows, new_tokens = len(prompts), settings["max_new_tokens"]

    def rollout():
        return backend.generate(prompts, max_new_tokens=new_tokens, temperature=settings["temperature"])

    rollout()  # warm up
    tokens = []
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        tokens.append(sum(len(gen.ids) for gen in rollout()))
        times.append(time.perf_counter() - t0)
    wall = statistics.median(times)
    generated = statistics.median(tokens)

    # what generate prefills: each distinct prompt but its last token, once (the group shares it); the last
    # prompt token is the first of the new_tokens decoding passes
    distinct = [list(p[:-1]) for p in dict.fromkeys(map(tuple, prompts))]
    width = max(map(len, distinct))
    ids = torch.tensor([[tokenizer.pad_token_id or 0] * (width - len(p)) + p for p in distinct])
    attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in distinct])

    def sampler_weights():  # the weights generate reads: the bfloat16 copy's inside its swap
        return backend.rollout.weights(backend.policy_version) if backend.rollout else contextlib.nullcontext()

    def prefill():
        with torch.inference_mode(), sampler_weights():
            backend.model(input_ids=ids, attention_mask=attn, use_cache=True, logits_to_keep=1)

    prefill()
    prefill_s = median_time(prefill, args.repeats)
    with sampler_weights():
        floor_step_s = linear_floor(backend.model, rows, args.repeats)
        packed_step_s = prepacked_floor(backend.model, rows, args.repeats)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            rollout()
        profiled_wall = (time.perf_counter() - t0) / args.repeats
    by_group: dict[str, float] = {}
    top = []
    for event in prof.key_averages():
        if event.key.startswith("ProfilerStep"):
            continue
        self_s = event.self_cpu_time_total / 1e6 / args.repeats
        by_group[group_of(event.key)] = by_group.get(group_of(event.key), 0.0) + self_s
        top.append((self_s, event.key, event.count // args.repeats))
    top.sort(reverse=True)
    in_ops = sum(by_group.values())

    bandwidth = machine.copy_bandwidth()
    weights = machine.weight_bytes(backend.model, 2 if args.rollout_dtype == "bfloat16" else None)
    share = machine.bandwidth_share(generated / wall, bandwidth["bytes_per_s"], weights, rows)
    decode_steps = new_tokens
    result = {
        "model": model_name, "rows": rows, "new_tokens": new_tokens, "threads": args.threads,
        "rollout_dtype": args.rollout_dtype,
        "repeats": args.repeats, "torch": torch.__version__,
        "rollout_wall_s": wall, "generated_tokens": generated, "tokens_per_s": generated / wall,
        "bandwidth": bandwidth, "bandwidth_share": share,
        "ceiling_rollout_s": generated / share["ceiling_tokens_per_s"],
        "prefill_s": prefill_s,
        "matrix_product_floor_per_step_s": floor_step_s,
        "matrix_product_floor_rollout_s": prefill_s + floor_step_s * decode_steps,
        "matrix_product_floor_bytes_per_s": weights / floor_step_s,
        # the share the bare matrix products would reach: the most any decoder of these weights gets on this core
        "matrix_product_floor_share": generated / (prefill_s + floor_step_s * decode_steps)
        / share["ceiling_tokens_per_s"],
        "rollout_over_matrix_product_floor": wall / (prefill_s + floor_step_s * decode_steps),
        # not what generate runs: how far a kernel with its weights laid out ahead of time gets on this core
        "prepacked_matrix_product_per_step_s": packed_step_s,
        "prepacked_matrix_product_bytes_per_s": weights / packed_step_s if packed_step_s else None,
        "prepacked_matrix_product_share": (generated / (prefill_s + packed_step_s * decode_steps)
                                           / share["ceiling_tokens_per_s"]) if packed_step_s else None,
        "profiled_wall_s": profiled_wall,
        "profile_self_cpu_s_by_group": dict(sorted(by_group.items(), key=lambda kv: -kv[1])),
        "profile_outside_operators_s": max(profiled_wall - in_ops, 0.0),
        "profile_top_operators": [{"op": name, "self_cpu_s": s, "calls": calls} for s, name, calls in top[:15]],
    }
    suffix = "" if args.rollout_dtype == "float32" else f"_{args.rollout_dtype}"
    out = RESULTS.with_name(f"rollout_profile{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out)
    print(f"rollout {wall:.2f} s for {generated} tokens ({generated / wall:.1f} tokens/s) = "
          f"{share['share']:.0%} of the bandwidth ceiling ({share['ceiling_tokens_per_s']:.0f} tokens/s, "
          f"{result['ceiling_rollout_s']:.2f} s)")
    print(f"prefill {prefill_s:.3f} s; matrix products alone {floor_step_s * 1000:.1f} ms per decoding step "
          f"({weights / floor_step_s / 1e9:.1f} GB/s of weights read), so a rollout made of them alone takes "
          f"{result['matrix_product_floor_rollout_s']:.2f} s ({result['matrix_product_floor_share']:.0%} of the ceiling; "
          f"the rollout takes {result['rollout_over_matrix_product_floor']:.2f}x that)")
    if packed_step_s:
        print(f"the same products on weights prepacked for oneDNN: {packed_step_s * 1000:.1f} ms per step "
              f"({weights / packed_step_s / 1e9:.1f} GB/s; a rollout made of them alone: "
              f"{result['prepacked_matrix_product_share']:.0%} of the ceiling)")
    print(f"profiled rollout {profiled_wall:.2f} s: " + ", ".join(
        f"{k} {v:.2f} s" for k, v in result["profile_self_cpu_s_by_group"].items())
        + f", outside any operator {result['profile_outside_operators_s']:.2f} s")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
