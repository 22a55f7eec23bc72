"""Sample logs shipped with the package, for the quickstart and the docs: customer-support conversations with tool
calls (`support_logs.jsonl`), held-out prompts (`held_out.jsonl`) and the store policy for `nsr`
(`support_policy.yaml`). `make_samples.py` writes the two jsonl files,
deterministically: `python -m stateset_agents.samples.make_samples`."""
from pathlib import Path

DIR = Path(__file__).resolve().parent
LOGS = DIR / "support_logs.jsonl"
HELD_OUT = DIR / "held_out.jsonl"
POLICY = DIR / "support_policy.yaml"  # the store's policy for the `nsr` reward
