"""Remote runs: run control through `stateset_agents.runs` (status, logs, stop, checkpoints, list), the spend ledger
(`costs`), `train_remote_plan` (quote and plan, rents nothing: `train-remote --plan-only`) and, only when the server
was started with --allow-spend, `train_remote_launch` (the same quote, the same cap, then a detached launch)."""
from __future__ import annotations

from typing import Any

from ..core.errors import InputError
from .tools import (ANY_LIST, ANY_OBJECT, REWARD_ARGS, Call, Tool, boolean, integer, number, obj, path, string)

#: a run id names a file in the state directory: no separator, no leading dot, so never a path out of it
RUN_ID = {"run_id": string("A run id (`runs_list`).", minLength=1, maxLength=128,
                           pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")}


def _runs_list(call: Call) -> dict[str, Any]:
    from .. import runs

    return {"runs": runs.list()}


def _run_status(call: Call) -> dict[str, Any]:
    from .. import runs

    return runs.status(call.args["run_id"])


def _run_logs(call: Call) -> dict[str, Any]:
    from .. import runs

    limit = call.get("max_events", 200)
    events = []
    for event in runs.logs(call.args["run_id"], follow=False, offset=call.get("offset", 0)):
        events.append(event)
        if len(events) >= limit:
            break
    return {"run_id": call.args["run_id"], "events": events, "truncated": len(events) >= limit}


def _run_stop(call: Call) -> dict[str, Any]:
    from .. import runs

    result = runs.stop(call.args["run_id"], wait=call.get("wait", False), timeout_s=call.get("timeout_s", 3600.0))
    return {k: v for k, v in result.items() if v is not None}


def _run_checkpoints(call: Call) -> dict[str, Any]:
    from .. import runs

    return {"run_id": call.args["run_id"], "checkpoints": runs.checkpoints(call.args["run_id"])}


def _costs(call: Call) -> dict[str, Any]:
    from ..remote import session, state

    if not call.get("orphans", False):
        rows = state.read_ledger()
        return {"ledger": rows, "total_usd": sum(float(r.get("spend_usd") or 0) for r in rows)}
    names = call.get("providers")
    if names is None:
        from ..core.registry import get_registry

        names = get_registry().default("provider", face="train-remote")
        if names is None:
            raise InputError("name the providers to check", field="providers")
    from ..core.errors import UnknownComponent

    try:
        providers = {n: session.open_provider(n) for n in names.split(",") if n}
    except UnknownComponent as exc:
        raise InputError(str(exc), field="providers") from None
    try:
        return {"orphans": session.orphans(providers)}
    finally:
        for p in providers.values():
            p.close()


def _remote_config(call: Call) -> dict[str, Any]:
    """The train-remote config from the arguments, as the command merges its flags over --config."""
    import secrets

    from ..remote import config as cfg

    config: dict[str, Any] = cfg.load(call.path("config_file")) if call.get("config_file") else {}
    flags = {"provider": call.get("provider"), "dataset": _s(call.path("dataset")), "base_model": call.get("base_model"),
             "base_model_revision": call.get("base_model_revision"),
             "eval_prompts": _s(call.path("eval_prompts")), "max_cost_usd": call.get("max_cost_usd"),
             "gpu": call.get("gpu"), "gpus": call.get("gpus"), "max_hours": call.get("max_hours"),
             "algorithm": call.get("algorithm"), "reward": call.get("reward"),
             "init_adapter": _s(call.path("init_adapter")), "image": call.get("image")}
    config.update({k: v for k, v in flags.items() if v is not None})
    if call.get("training"):
        config["training"] = {**(config.get("training") or {}), **call.args["training"]}
    if call.get("reward_config") is not None:
        from ..cli.options import reward_and_config

        config["reward"], file_config = reward_and_config(config.get("reward"), None, call.path("reward_config"))
        config["reward_config"] = {**(config.get("reward_config") or {}), **file_config}
    if call.get("new_run", False):
        config["salt"] = secrets.token_hex(8)
    return cfg.validated(config, source=call.args.get("config_file"))


def _s(value) -> str | None:
    return None if value is None else str(value)


def _plan(call: Call, *, launch: bool) -> dict[str, Any]:
    """Quote and check the cap first (`train-remote`'s own steps), then write the plan; with `launch`, launch it
    detached (the remote deadline and the cap hold; `run_status` watches it)."""
    from pathlib import Path

    from ..cli.remote_cmd import _new_workspace, _quote_first
    from ..remote import session

    full = _remote_config(call)
    output = call.path("output")
    with session.open_provider(full["provider"], full.get("provider_config")) as provider:
        _quote_first(full, provider, plan_only=not launch)
        plan = _new_workspace(full, provider, None)
        workspace = Path(plan.get("_workspace") or session.state.state_dir() / "workspaces" / plan["run_id"])
        result = {"run_id": plan["run_id"], "provider": plan["provider"], "gpu": plan["gpu"],
                  "image": plan.get("image"), "max_hours": plan["max_hours"], "quote": plan["quote"],
                  "worst_case_usd": plan["worst_case_usd"], "max_cost_usd": plan["max_cost_usd"],
                  "checksum": plan["checksum"], "workspace": str(workspace), "notice": plan.get("_notice"),
                  "launch_command": f"stateset-agents finetune launch {workspace}"}
        if launch:
            record = session.launch(workspace, provider, output=output)
            result.update(launched=True, attached=bool(record.get("attached")), phase=record.get("phase"),
                          job=record.get("job") or {}, notice=record.get("notice") or result["notice"])
        return result


REMOTE_ARGS = {
    "provider": string("Provider (`plugins_list` kind provider)."),
    "dataset": path("curated.jsonl from `improve_run`"),
    "base_model": string("Base model (hub id or path remotely)."),
    "base_model_revision": string("With a hub id: its branch, tag or commit sha (recorded in the plan)."),
    "eval_prompts": path("Validation prompts (validation.jsonl)"),
    "init_adapter": path("Start from a parent run's adapter (RUN/adapter)"),
    "gpu": string("Provider GPU id or short name (H100, A100-80GB); default: the provider's."),
    "gpus": integer("GPUs (default 1).", 1), "max_hours": number("Wall-clock limit, enforced remotely.",
                                                                 exclusiveMinimum=0),
    "algorithm": string("Trainer (objective)."), "reward": REWARD_ARGS["reward"],
    "reward_config": REWARD_ARGS["reward_config"],
    "config_file": path("The shared config (`stateset-agents finetune schema`)"),
    "training": {"type": "object", "description": "Objective fields for the trainer."},
    "image": string("Trainer image NAME@sha256:DIGEST (providers that run images)."),
    "new_run": boolean("Run the same job again (a fresh run id)."),
}
PLAN_OUT = obj(("run_id", "provider", "worst_case_usd", "max_cost_usd", "checksum", "workspace"),
               run_id={"type": "string"}, provider={"type": "string"}, worst_case_usd={"type": "number"},
               max_cost_usd={"type": "number"}, checksum={"type": "string"}, workspace={"type": "string"},
               quote=ANY_OBJECT, launched={"type": "boolean"}, job=ANY_OBJECT)


def _plan_text(r: dict[str, Any]) -> str:
    verb = "launched" if r.get("launched") else "planned (nothing rented)"
    return (f"run {r['run_id']} {verb} on {r['provider']}: worst case ${r['worst_case_usd']:.2f} of the "
            f"${r['max_cost_usd']:.2f} cap; workspace {r['workspace']}")


TOOLS = [
    Tool("runs_list", "The training runs recorded here, newest first (`finetune list --json`).", {}, (),
         obj(("runs",), runs=ANY_LIST), _runs_list, lambda r: f"{len(r['runs'])} runs"),
    Tool("run_status", "A run's record and the provider's view of its job: checkpoints, whether it was stopped, "
                       "whether it is quarantined (`finetune status`).", RUN_ID, ("run_id",),
         obj(("run_id", "phase", "checkpoints"), run_id={"type": "string"}, phase={"type": ["string", "null"]},
             checkpoints=ANY_LIST, quarantined={"type": ["object", "null"]}, stop_requested={"type": "boolean"}),
         _run_status, lambda r: f"{r['run_id']}: {r['phase']}, {len(r['checkpoints'])} checkpoints"),
    Tool("run_logs", "The job's events (its events.jsonl) from the provider or the collected copy (`finetune logs "
                     "--json`), from a byte offset; never follows.",
         {**RUN_ID, "offset": integer("Byte offset to read from.", 0),
          "max_events": integer("Most events returned (default 200).", 1)}, ("run_id",),
         obj(("run_id", "events"), run_id={"type": "string"}, events=ANY_LIST, truncated={"type": "boolean"}),
         _run_logs, lambda r: f"{len(r['events'])} events"),
    Tool("run_stop", "Cooperative stop (`finetune stop`): the worker finishes the current update, saves a full "
                     "checkpoint and ends stopped; nothing is killed.",
         {**RUN_ID, "wait": boolean("Wait for the stop and collect the run (default: ask and return)."),
          "timeout_s": number("Seconds to wait with wait: true.", exclusiveMinimum=0)}, ("run_id",),
         obj(("run_id", "requested"), run_id={"type": "string"}, requested={"type": "boolean"}), _run_stop,
         lambda r: f"stop {'requested' if r['requested'] else 'not requested'} for {r['run_id']}"),
    Tool("run_checkpoints", "A run's checkpoints: step, committed updates, adapter sha256, whether complete, "
                            "validation score (`finetune checkpoints --json`).", RUN_ID, ("run_id",),
         obj(("run_id", "checkpoints"), run_id={"type": "string"}, checkpoints=ANY_LIST), _run_checkpoints,
         lambda r: f"{len(r['checkpoints'])} checkpoints"),
    Tool("costs", "The local ledger of what remote jobs spent (`costs --json`); with orphans: true, live jobs nobody "
                  "is watching (reads only).",
         {"orphans": boolean("List live jobs nobody is watching."),
          "providers": string("Comma list of providers to check for orphans.")}, (),
         obj((), ledger=ANY_LIST, total_usd={"type": "number"}, orphans=ANY_LIST), _costs,
         lambda r: (f"{len(r['orphans'])} orphans" if "orphans" in r else f"total spent ${r['total_usd']:.4f}")),
    Tool("train_remote_plan", "Quote a remote training run and write its plan (`train-remote --plan-only`): the "
                              "worst case (price x GPUs x max hours) is checked against max_cost_usd first and "
                              "refused above it. Rents nothing; needs no credentials where the price needs no API.",
         {**REMOTE_ARGS, "max_cost_usd": number("Hard cap in USD.", exclusiveMinimum=0)}, ("max_cost_usd",),
         PLAN_OUT, lambda call: _plan(call, launch=False), _plan_text),
    Tool("train_remote_launch", "SPENDS MONEY (offered only with --allow-spend). Quote, refuse above max_cost_usd, "
                                "write the plan and launch it detached under the cap and a remote deadline "
                                "(`train-remote --detach`); a retried launch of the same plan attaches to its job. "
                                "Watch with run_status, stop with run_stop.",
         {**REMOTE_ARGS, "max_cost_usd": number("Hard cap in USD (required).", exclusiveMinimum=0),
          "output": path("Run directory for the artifacts")}, ("max_cost_usd",),
         PLAN_OUT, lambda call: _plan(call, launch=True), _plan_text, spends=True),
]
