"""A test-only recipe whose generator gives different customers the same conversation (word for word, up to
case and punctuation): a split by customer then puts one conversation on two sides, which the audit must refuse."""
from __future__ import annotations

from stateset_agents import hookimpl


class Leaky:
    tools: list = []
    policy = "name: leaky\nrules: []\n"
    policy_text = "# Leaky\n"
    log_format = "openai"
    rewards = [{"reward": "customer_support", "config": {}}]

    def generate(self, size, seed):
        for i in range(size):
            opening = "Where is my parcel?" if i % 2 else "where is my PARCEL"
            yield {"id": f"leaky-{i}", "messages": [{"role": "user", "content": opening},
                                                    {"role": "assistant", "content": "Let me check."}],
                   "metadata": {"customer_id": f"c{i}", "label": "good"}}


class Unlabelled(Leaky):
    def generate(self, size, seed):
        for i, conv in enumerate(super().generate(size, seed)):
            if i == 3:
                del conv["metadata"]["label"]
            yield conv


@hookimpl
def register_recipes(register):
    register("tests.industry.leaky_recipe:RECIPE", name="leaky", version="0.0.1", summary="leaks on purpose")
    register("tests.industry.leaky_recipe:UNLABELLED", name="unlabelled", version="0.0.1", summary="no label")


RECIPE, UNLABELLED = Leaky(), Unlabelled()
