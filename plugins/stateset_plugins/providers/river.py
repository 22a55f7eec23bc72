"""`provider:river`: River hosts the model and exposes sampling, forward-backward, optimizer steps and
checkpoints, so it plugs into the trainer engine's backend seam (plugins/stateset_plugins/trainers/backend.py)
instead of renting a machine. Its client needs Python 3.12+, so this component runs out of process, in the `river`
image; on this kernel's Python it is listed as unavailable.

Pricing: River bills usage (tokens), not hours. The quote is the job's worst-case token budget (steps x batch x
generations x (prompt + completion tokens)) times a dated per-million-token price table. The plugin ships no
prices of its own: until `price_table` (provider_config: {"as_of": DATE, "models": {BASE_MODEL: {"train_per_mtok",
"sample_per_mtok"}}}) names the base model, the job cannot be priced and `--max-cost` refuses it.
"""
from __future__ import annotations

from typing import Any, Mapping

from stateset_agents import Provider
from stateset_agents.errors import InputError, StatesetError

from . import VERSION, common

KEY_ENV = "RIVER_API_KEY"
PRICE_TABLE: dict[str, Any] = {"as_of": None, "models": {}}


def token_budget(training: Mapping[str, Any]) -> dict[str, int]:
    steps = int(training.get("steps", 50))
    rows = int(training.get("batch_size", 4)) * int(training.get("num_generations", 8))
    prompt, completion = int(training.get("max_prompt_tokens", 512)), int(training.get("max_new_tokens", 64))
    return {"train_tokens": steps * rows * (prompt + completion), "sample_tokens": steps * rows * completion}


class RiverProvider(Provider):
    name = "river"
    version = VERSION

    def quote(self, plan):
        common.require_env(KEY_ENV, how="create an API key in River's console and export RIVER_API_KEY")
        table = self.config.get("price_table") or PRICE_TABLE
        model = plan.get("base_model")
        if not model:
            raise InputError("river needs --base-model (a model River hosts)", field="base_model")
        budget = token_budget(plan.get("training") or {})
        prices = (table.get("models") or {}).get(model)
        if not prices or not table.get("as_of"):
            return common.quote("river", "hosted", None, source="river price table",
                                reason=f"no dated River price for {model!r} (set provider_config.price_table)",
                                **budget)
        total = (budget["train_tokens"] * float(prices["train_per_mtok"])
                 + budget["sample_tokens"] * float(prices["sample_per_mtok"])) / 1e6
        # expressed per job-hour so the shared cap arithmetic applies: worst case = total over max_hours
        return common.quote("river", "hosted", total / float(plan["max_hours"]),
                            source=f"river price table as of {table['as_of']} x token budget",
                            image={"name": "river", "digest": "hosted"}, **budget)

    def launch(self, plan):
        raise StatesetError("river jobs need the trainer engine's River backend, which is not available yet; "
                            "river can quote but not launch (docs/remote.md)")

    def status(self, run_id):
        return {"run_id": run_id, "state": "missing", "uptime_s": 0, "cost_per_hour": 0.0}

    def terminate(self, run_id):
        return {"run_id": run_id, "terminated": False}

    def list_jobs(self):
        return []

    def artifacts(self, request):
        return {"run_id": request["run_id"], "state": "missing", "files": []}

    def read_artifact(self, request):
        raise StatesetError("river runs have no artifacts yet")
