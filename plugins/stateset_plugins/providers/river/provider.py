"""`provider:river`: River hosts the model and exposes sampling, forward-backward, optimizer steps and
checkpoints, so it plugs into the trainer engine's backend seam (`backend`, kind ``river``) instead of renting a
machine. Its client needs Python 3.12+, so this component runs out of process, in the `river` image; on this
kernel's Python it is listed as unavailable.

A job is the trainer with ``backend: river`` in a detached worker process beside this component (the local
provider's job directory, worker and artifact receipt, under STATE/river/jobs/RUN_ID). The worker holds the River
session, tagged with the run id; River bills the tokens it reports, which the backend writes to usage.json as it
goes. `status` prices that usage with the dated table the job was launched with; `terminate` asks the trainer to
stop at the next update boundary (the session closes, and billing with it) before it falls back to killing the
worker, whose session River then reaps when its heartbeat stops.

Chat (`chat-remote`): River samples the run's own inference checkpoint (its river:// path is in the run's
adapter/river_checkpoint.json, written when the trainer saved the adapter), in a River session tagged with the chat
session id that this process holds; prompts are rendered with the chat template training used. A chat session is
priced like a job: the quote is `max_turns` turns of at most the prompt limit plus `max_new_tokens` at the table's
sampling price, each turn reserves its own worst case before it is sent, and spend is the table times the tokens
River sampled. Closing the session ends River's billing; a client that dies stops its heartbeat, and River reaps it.

Pricing: River bills usage (tokens), not hours. The quote is the job's worst-case token budget times a dated
per-million-token price table. The plugin ships no prices of its own: until `price_table` (provider_config:
{"as_of": DATE, "models": {BASE_MODEL: {"train_per_mtok", "sample_per_mtok"}}}) names the base model, the job
cannot be priced and `--max-cost` refuses it. A quote needs no RIVER_API_KEY; a launch does.

Run control is the local provider's (the worker runs here): `stop` writes the stop file in the job directory (the
trainer saves at the next update boundary, closes its River session and ends, state stopped), `logs` reads the
job's events.jsonl, and `status` passes the worker's checkpoints and quarantine record through.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import load_json, write_json
from stateset_agents.plugin_api.jobs import STOP_FILE, state_dir
from stateset_plugins.models.chat import CHAT_DEFAULTS, completed_event, decoding_of

from .. import common
from ..local import LocalProvider
from . import CHECKPOINT_FILE, DEFAULT_ENDPOINT, KEY_ENV
from . import sdk as river_sdk

PRICE_TABLE: dict[str, Any] = {"as_of": None, "models": {}}
STOP_WAIT_S = 300.0  # one update and a checkpoint on River, before the worker is killed instead


def token_budget(training: Mapping[str, Any]) -> dict[str, int]:
    """Worst-case tokens: every row is scored twice per update (the forward pass that gives the loss its log-probs,
    then the forward-backward), plus once by the KL reference when beta > 0; sampled tokens include the prompt."""
    steps = int(training.get("steps", 50))
    rows = int(training.get("batch_size", 4)) * int(training.get("num_generations", 8))
    prompt, completion = int(training.get("max_prompt_tokens", 512)), int(training.get("max_new_tokens", 64))
    passes = 2 + (1 if float(training.get("beta", 0.04)) > 0 else 0)
    return {"train_tokens": steps * rows * (prompt + completion) * passes,
            "sample_tokens": steps * rows * (prompt + completion)}


def usage_cost(usage: Mapping[str, Any], prices: Mapping[str, Any]) -> float:
    return (float(usage.get("train_tokens") or 0) * float(prices["train_per_mtok"])
            + float(usage.get("sample_tokens") or 0) * float(prices["sample_per_mtok"])) / 1e6


class RiverProvider(LocalProvider):
    name = "river"

    def _key(self) -> str:
        return common.require_env(KEY_ENV, how="create an API key in River's console and export RIVER_API_KEY")

    @property
    def root(self) -> Path:
        return Path(self.config.get("jobs_dir") or state_dir() / "river" / "jobs")

    def _prices(self, model: str | None) -> tuple[dict[str, Any] | None, str | None]:
        table = self.config.get("price_table") or PRICE_TABLE
        prices = (table.get("models") or {}).get(model)
        return (prices, table["as_of"]) if prices and table.get("as_of") else (None, None)

    def quote(self, plan):  # priced from the dated table: no key needed (`--plan-only` without credentials)
        if plan.get("chat"):
            return self._chat_quote(plan)
        model = plan.get("base_model")
        if not model:
            raise InputError("river needs --base-model (a model River hosts)", field="base_model")
        budget = token_budget(plan.get("training") or {})
        prices, as_of = self._prices(model)
        if prices is None:
            return common.quote("river", "hosted", None, source="river price table",
                                reason=f"no dated River price for {model!r} (set provider_config.price_table)",
                                **budget)
        # expressed per job-hour so the shared cap arithmetic applies: worst case = total over max_hours
        return common.quote("river", "hosted", usage_cost(budget, prices) / float(plan["max_hours"]),
                            source=f"river price table as of {as_of} x token budget",
                            image={"name": "river", "digest": "hosted"}, **budget)

    def launch(self, plan):
        self._key()
        return super().launch(plan)

    def _prepare_job(self, staging, plan, meta):
        model = plan["config"].get("base_model")
        prices, as_of = self._prices(model)
        if prices is None:
            raise InputError(f"no dated River price for {model!r}; refusing to launch what cannot be priced",
                             field="provider_config")
        meta.update(prices=prices, prices_as_of=as_of)  # status prices usage with the table the job began with
        write_json(staging / "backend.json", {"kind": "river", "run_id": plan["run_id"],
                                              "endpoint": self.config.get("endpoint") or DEFAULT_ENDPOINT,
                                              "usage_path": str(self._job(plan["run_id"]) / "usage.json")})

    def status(self, run_id):
        if self._is_chat(run_id):
            return self._chat_status(run_id)
        status = super().status(run_id)
        job = self._job(run_id)
        if status["state"] == "missing":
            return status
        usage = load_json(job / "usage.json") if (job / "usage.json").exists() else {}
        spend = usage_cost(usage, load_json(job / "job.json")["prices"])
        # no hourly rate: River bills tokens, so the watchdog's floor is the quote and its look-ahead the last poll
        return {**status, "usage": {k: usage.get(k, 0) for k in ("train_tokens", "sample_tokens")},
                "spend_usd": round(spend, 6), "cost_per_hour": 0.0}

    def _stop_worker(self, run_id: str, pid: int) -> None:
        job = self._job(run_id)
        (job / STOP_FILE).touch()
        deadline = time.monotonic() + float(self.config.get("stop_wait_s", STOP_WAIT_S))
        while time.monotonic() < deadline:
            st = load_json(job / "status.json")
            if st.get("state") != "running":
                return  # the trainer saved, closed its River session and reported
            time.sleep(0.05)
        self._kill_worker(run_id, pid)

    # ------------------------------------------------------------------------------------------------------ chat
    def _checkpoint(self, run_dir: str | Path) -> dict[str, Any]:
        path = Path(run_dir) / "adapter" / CHECKPOINT_FILE
        if not path.is_file():
            raise InputError(f"the run was not trained on River (no adapter/{CHECKPOINT_FILE}); River can only chat "
                             "with a checkpoint it holds", path=str(path))
        return load_json(path)

    def _chat_quote(self, plan):
        chat = plan["chat"]
        model = self._checkpoint(chat["run_dir"])["base_model"]
        prices, as_of = self._prices(model)
        per_turn = int(CHAT_DEFAULTS["max_prompt_tokens"]) + int(chat["max_new_tokens"])
        budget = {"sample_tokens": per_turn * int(chat["max_turns"])}
        if prices is None:
            return common.quote("river", "hosted", None, source="river price table", **budget,
                                reason=f"no dated River price for {model!r} (set provider_config.price_table)")
        return common.quote("river", "hosted", usage_cost(budget, prices) / float(plan["max_hours"]),
                            source=f"river price table as of {as_of} x {chat['max_turns']} turns of {per_turn} "
                                   "tokens", image={"name": "river", "digest": "hosted"},
                            turn_usd=usage_cost({"sample_tokens": per_turn}, prices), **budget)

    def _open_chat(self, session_id, request, meta):
        from stateset_plugins.models.loading import load_hosted_tokenizer
        from stateset_plugins.models.rendering import ChatRenderer

        checkpoint = self._checkpoint(request["adapter"]["dir"])
        prices, as_of = self._prices(checkpoint["base_model"])
        if prices is None:
            raise InputError(f"no dated River price for {checkpoint['base_model']!r}; refusing a chat that cannot be "
                             "priced", field="provider_config")
        tokenizer, _ = load_hosted_tokenizer(checkpoint["base_model"], served_by=self.name)
        renderer = ChatRenderer(tokenizer, int(CHAT_DEFAULTS["max_prompt_tokens"]))
        client = river_sdk.connect(self._key(), self.config.get("endpoint") or DEFAULT_ENDPOINT)
        try:
            context, session = river_sdk.open_session(client, session_id)
        except BaseException:
            river_sdk.close(client)
            raise

        def close():
            try:
                river_sdk.close_session(context)
            finally:
                river_sdk.close(client)

        meta.update(checkpoint=checkpoint["path"], base_model=checkpoint["base_model"], prices=prices,
                    prices_as_of=as_of)
        return {"close": close, "session": session, "renderer": renderer, "usage": {"sample_tokens": 0}}

    def chat_turn(self, request):
        held, meta = self._held_chat(request)
        renderer = held["renderer"]
        prompt = renderer.prompt_ids(request["messages"], request.get("tools") or None)
        decoding = decoding_of(request)
        groups, usage = river_sdk.sample_checkpoint(
            held["session"], meta["base_model"], meta["checkpoint"], [prompt],
            max_tokens=int(request.get("max_new_tokens") or meta["max_new_tokens"]),
            temperature=float(decoding["temperature"]), seed=int(decoding["seed"]))
        for k, v in usage.items():
            held["usage"][k] = held["usage"].get(k, 0) + int(v)
        write_json(self.chats_root / request["session_id"] / "usage.json", held["usage"])
        sample = groups[0][0]
        return completed_event(renderer.tokenizer, sample["tokens"], sample["stop_reason"] == "length", usage=usage)

    def _chat_spend(self, session_id, meta):
        path = self.chats_root / session_id / "usage.json"
        return usage_cost(load_json(path), meta["prices"]) if path.exists() else 0.0
