"""Sample logs shipped with the package, for the quickstart and the docs: customer-support conversations with tool
calls (`support_logs.jsonl`), held-out prompts (`held_out.jsonl`), the quickstart's frozen evaluation splits
(`validation.jsonl` chooses the checkpoint, `test.jsonl` is looked at once) and the store policy for the
symbolic-policy reward (`support_policy.yaml`); `quickstart.json` is the recipe for them (log format, reward,
stages, presets). `make_samples.py` writes the jsonl files, deterministically:
`python -m stateset_agents.samples.make_samples`. Their sha256 are pinned in tests/training/test_samples_frozen.py;
a change needs a line in CHANGELOG.md."""
from pathlib import Path

DIR = Path(__file__).resolve().parent
LOGS = DIR / "support_logs.jsonl"
HELD_OUT = DIR / "held_out.jsonl"
VALIDATION = DIR / "validation.jsonl"
TEST = DIR / "test.jsonl"
POLICY = DIR / "support_policy.yaml"  # the store's policy for the `nsr` reward
