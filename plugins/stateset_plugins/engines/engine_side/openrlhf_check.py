"""Run INSIDE OpenRLHF's venv (never imported by the project): OpenRLHF's own code checks a rendered run.

`python openrlhf_check.py CASES.json` with ``{"render_dir", "remote_url", "cases": [{"index", "response"}],
"batch": [{"index", "response"}]}``:
1. The argument parser of the installed `openrlhf/cli/train_ppo_ray.py` (its ``__main__`` block, run with the
   rendered argv and the final ``train(args)`` call caught) parses and checks the arguments.
2. Each prompt row goes through OpenRLHF's `preprocess_data` (its prompt format, with the chat template), then
   through `SingleTurnAgentExecutor.execute` (`openrlhf.utils.agent`, the `--reward.remote_url` path) with a
   stand-in for vLLM that returns the case's response: the executor calls our scorer and reports its reward.
3. A batch goes through the executor's `_fetch_rewards_via_http` (the batched request).
``also`` names more rendered runs (other algorithms) for step 1 only.
Prints one JSON line: {"openrlhf", "parsed": {...}, "also": {...}, "scores": [...], "batch_scores": [...]}.
"""
import ast
import asyncio
import importlib.metadata
import json
import sys
from pathlib import Path
from types import SimpleNamespace


def main_block_args(argv):
    import importlib.util

    spec = importlib.util.find_spec("openrlhf.cli.train_ppo_ray")
    tree = ast.parse(Path(spec.origin).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))
    caught = {}

    def train(args):  # the block's last statement: training starts here, so stop
        caught["args"] = args

    import argparse
    import os
    from datetime import datetime

    namespace = {"argparse": argparse, "os": os, "datetime": datetime, "train": train, "__name__": "__main__"}
    saved = sys.argv
    sys.argv = ["train_ppo_ray", *argv]
    try:
        exec(compile(ast.Module(body=block.body, type_ignores=[]), spec.origin, "exec"), namespace)
    finally:
        sys.argv = saved
    return caught["args"]


def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<pad>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")
    fast.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    return fast


class CannedEngine:
    """Stands in for vLLM (GPU-only): generation is not under test, the reward path is."""

    def __init__(self, tokenizer, text):
        self.ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        self.text = text

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = SimpleNamespace(token_ids=list(self.ids), text=self.text, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def parse_rendered(render_dir, remote_url):
    argv = json.loads((render_dir / "args.json").read_text())["argv"]
    args = main_block_args([remote_url if a == "{SCORER_URL}" else a for a in argv])
    return args, {"estimator": args.algo.advantage.estimator, "remote_urls": len(args.reward.remote_url),
                  "label_key": args.data.label_key, "seed": args.train.seed, "model": args.actor.model_name_or_path,
                  "policy_loss_type": args.actor.policy_loss_type,
                  "eps_clip_low_high": list(args.actor.eps_clip_low_high),
                  "dynamic_filtering": args.algo.dynamic_filtering_enable,
                  "critic": args.critic.model_name_or_path, "lora_rank": args.ds.lora.rank}


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    render_dir = Path(spec["render_dir"])
    from openrlhf.datasets.prompts_dataset import preprocess_data
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    args, parsed = parse_rendered(render_dir, spec["remote_url"])
    also = {name: parse_rendered(Path(path), spec["remote_url"])[1] for name, path in spec.get("also", {}).items()}

    rows = [json.loads(line) for line in (render_dir / args.data.prompt_dataset.split("/")[-1]).read_text()
            .splitlines() if line.strip()]
    tokenizer = byte_tokenizer()
    executor = SingleTurnAgentExecutor(remote_rm_url=args.reward.remote_url)
    scores = []
    for case in spec["cases"]:
        prompt, label = preprocess_data(rows[case["index"]], None, args.data.input_key, args.data.label_key,
                                        apply_chat_template=tokenizer.apply_chat_template)
        params = SimpleNamespace(max_tokens=args.rollout.max_new_tokens, logprobs=None)
        out = asyncio.run(executor.execute(prompt, label, params, args.data.max_len, tokenizer,
                                           CannedEngine(tokenizer, case["response"])))
        reward = out["reward"]
        scores.append(None if reward is None else float(reward[0] if isinstance(reward, list) else reward))
    queries, prompts, labels = [], [], []
    for case in spec.get("batch", []):
        prompt, label = preprocess_data(rows[case["index"]], None, args.data.input_key, args.data.label_key,
                                        apply_chat_template=tokenizer.apply_chat_template)
        queries.append(prompt + case["response"])
        prompts.append(prompt)
        labels.append(label)
    batch = asyncio.run(executor._fetch_rewards_via_http(queries, prompts, labels)) if queries else []
    print(json.dumps({"openrlhf": importlib.metadata.version("openrlhf"), "parsed": parsed, "also": also,
                      "scores": scores,
                      "batch_scores": [s for reply in batch for s in reply["rewards"]]}))


if __name__ == "__main__":
    main()
