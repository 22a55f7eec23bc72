"""Remote training under a hard cost cap: `train-remote`, `finetune`, `chat-remote`, `costs` (docs/remote.md).

Commands that can spend money say so in their help ("SPENDS MONEY"). Logic lives in `stateset_agents.remote`.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from .app import Group, app, console, err_console
from .options import REWARD_FILE_HELP, reward_and_config
from .registry_params import one_of, plugin_fields, registry_command

finetune_app = typer.Typer(help="Plan-first fine-tuning: schema, validate, prepare, launch (spends money), status.",
                           no_args_is_help=True, cls=Group)
#: Providers, trainers and their defaults come from the registry (`remote.config.schema`): any installed provider,
#: the trainers that declare "remote", the chat-capable providers for chat-remote.
TrainRemoteCommand = registry_command("train-remote", help={
    "provider_name": one_of("provider", face="train-remote"),
    "algorithm": one_of("trainer", "remote", face="train-remote", lead="Trainer (objective)")})
ChatRemoteCommand = registry_command(help={"provider_name": one_of("provider", "chat", lead="A provider that chats")})
CostsCommand = registry_command(help={"provider_names": lambda registry: (
    "Comma list of providers to check (default: "
    f"{registry.default('provider', face='train-remote') or 'name them'}).")})
app.add_typer(finetune_app, name="finetune")


def _print_json(obj: Any) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")


def _plan_table(plan: dict[str, Any]) -> None:
    from rich.table import Table

    from ..remote.cap import describe_quote

    t = Table(title=f"plan {plan['run_id']}", show_header=False)
    t.add_row("provider", plan["provider"])
    t.add_row("GPU", f"{plan['gpu']['id']} x{plan['gpu']['count']}")
    t.add_row("image", plan["image"].get("ref") or f"{plan['image'].get('name')} @ {plan['image'].get('digest')}")
    t.add_row("max hours", str(plan["max_hours"]))
    t.add_row("quote", describe_quote(plan["quote"], plan["gpu"]["count"], plan["max_hours"], plan["worst_case_usd"]))
    t.add_row("worst case / cap", f"${plan['worst_case_usd']:.2f} / ${plan['max_cost_usd']:.2f}")
    t.add_row("checksum", plan["checksum"])
    err_console.print(t)


def _recorded_image(algorithm: str) -> tuple[str, dict[str, Any]] | None:
    """(role, record) of the built image that holds trainer:ALGORITHM (`images build`), when one is recorded."""
    from ..core.registry import get_registry
    from ..core.runtimes.container import image_for

    return image_for(get_registry().resolve(algorithm, "trainer"))


def _image_how(algorithm: str, found: tuple[str, dict[str, Any]] | None) -> str:
    """The two ways to give a remote job its image, worded for what is recorded here."""
    from ..core.registry import get_registry
    from ..core.runtimes.container import _role_for, images_file

    role = found[0] if found else _role_for(get_registry().resolve(algorithm, "trainer"))
    if found and found[1].get("pinned"):
        built = f"leave --image and `image` out to run the {role} image pinned here ({found[1]['pinned']})"
    elif found:
        built = (f"push the {role} image built here ({found[1].get('tag') or found[1].get('id', '')[:19]}; tag it "
                 f"for your registry, `docker push`), then record its registry digest: `stateset-agents images pin "
                 f"{role}`")
    else:
        built = (f"build, push and pin the image that holds trainer:{algorithm}: `stateset-agents images build "
                 f"{role}`, tag it for your registry and `docker push`, then `stateset-agents images pin {role}` "
                 f"(nothing is recorded in {images_file()} yet)")
    return f"(1) pass --image NAME@sha256:DIGEST (or `image` in the config), or (2) {built}"


def _quote_first(full: dict[str, Any], provider, *, plan_only: bool) -> None:
    """Quote and check the cap before anything else can refuse, showing both; then the checks that come after the
    price (a launch needs a live price; a provider that runs an image needs one pinned by digest). The image the
    job runs: --image or the config's, else the recorded one of the image that holds the trainer (`images pin`).
    Sets full["image"] to the recorded image it takes."""
    from ..core.errors import InputError
    from ..remote import session
    from ..remote.cap import CapExceeded, check_cap_value, describe_quote, enforce_cap, worst_case

    if "max_cost_usd" not in full:
        raise InputError("a cap is required: --max-cost USD (or max_cost_usd in the config)", field="max_cost_usd")
    cap = check_cap_value(full["max_cost_usd"])
    quote = provider.quote(session.quote_request(full))  # needs no image: the price does not depend on it
    image = dict(quote.get("image") or {})
    found = None
    image_line = (f"{image.get('name')} @ {image.get('digest')}" if image.get("name") or image.get("digest") else
                  "none (the provider names no image)")
    if image.get("problem") and not full.get("image"):
        found = _recorded_image(full["algorithm"])
        pinned = (found[1].get("pinned") if found else None) or ""
        if pinned:
            full["image"], image = pinned, {"ref": pinned}
            image_line = f"{pinned} (the {found[0]} image, pinned by `images pin {found[0]}`)"
    if image.get("problem"):
        image_line = "none pinned (see below)"
    elif image.get("ref") and not found:
        image_line = image["ref"]
    rows = [("GPU", f"{quote.get('gpu')} x{full['gpus']}" + (f" ({quote['gpu_default']})"
                                                             if quote.get("gpu_default") else "")),
            ("image", image_line), ("max hours", f"{full['max_hours']:g}")]

    def show(more: list[tuple[str, str]]) -> None:  # plain lines, never wrapped: they are read and grepped
        err_console.print(f"quote ({quote.get('provider')}):\n" + "\n".join(f"  {k}: {v}" for k, v in rows + more),
                          highlight=False, markup=False, soft_wrap=True)

    try:
        total = worst_case(quote, full["gpus"], full["max_hours"])
    except CapExceeded:
        show([("price", f"none ({quote.get('reason', 'no price available')}; from {quote.get('source')})")])
        raise
    show([("quote", describe_quote(quote, full["gpus"], full["max_hours"], total)),
          ("worst case / cap", f"${total:.2f} / ${cap:.2f}" + (" (within the cap)" if total <= cap else
                                                               " (ABOVE the cap)"))])
    enforce_cap(quote, full["gpus"], full["max_hours"], cap)
    if quote.get("live") is False:
        note = quote.get("live_needs") or "this is not a live price"
        if not plan_only:
            raise InputError(f"{note}; nothing was rented (`--plan-only` shows this quote and writes the plan)",
                             field="provider")
        err_console.print(f"[yellow]{note}[/]", highlight=False)
    if image.get("problem"):
        given = full.get("image")
        why = (f"the one given ({given}) is not pinned by digest (NAME@sha256:DIGEST; a tag can move under a run "
               "id)" if given else "none is given or recorded")
        raise InputError(f"{quote.get('provider')} runs the trainer in a container image pinned by digest, and "
                         f"{why}: {_image_how(full['algorithm'], found or _recorded_image(full['algorithm']))}",
                         field="image")


def _new_workspace(config: dict[str, Any], provider, workspace: Path | None) -> dict[str, Any]:
    """Prepare into `workspace`, or into STATE/workspaces/RUN_ID (the same job reuses its workspace)."""
    import shutil
    import tempfile

    from ..remote import session, state
    from ..remote.plan import load_verified

    if workspace is not None:
        return session.prepare(config, workspace, provider)
    root = state.private_dir(state.state_dir() / "workspaces")
    tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=root))
    try:
        plan = session.prepare(config, tmp, provider)
        final = root / plan["run_id"]
        if final.exists():
            return load_verified(final)
        tmp.rename(final)
        return {**plan, "_workspace": str(final)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _watch(run_id: str, provider) -> dict[str, Any]:
    """Watch with a live line; Ctrl-C asks detach or cancel (and cancels when there is no terminal to ask)."""
    from ..remote import session

    def tick(status: dict[str, Any]) -> None:
        err_console.print(f"[dim]{run_id}: {status.get('state')} · uptime {float(status.get('uptime_s') or 0):.0f}s "
                          f"· spent ${status.get('accrued_usd', 0):.4f}[/]", highlight=False)

    try:
        return session.watch(run_id, provider, on_tick=tick)
    except KeyboardInterrupt:
        choice = "c"
        if sys.stdin.isatty():
            choice = typer.prompt("detach (the job keeps running; --attach later) or cancel? [d/c]",
                                  default="c").strip().lower()[:1]
        if choice == "d":
            err_console.print(f"detached; reattach with: stateset-agents train-remote --attach {run_id}")
            raise typer.Exit(130)
        record = session.cancel(run_id, provider)
        err_console.print(f"cancelled {run_id}; spent ${record.get('spend_usd', 0):.4f}")
        raise typer.Exit(130)


def _notice(text: str | None) -> None:
    """What the session found that the user must know before anything else (an unconfirmed launch's job)."""
    if text:
        err_console.print(f"[yellow]{text}[/]", highlight=False, soft_wrap=True)


def _report(record: dict[str, Any]) -> int:
    phase = record.get("phase")
    spent = f"${float(record.get('spend_usd') or 0):.4f} of ${float(record.get('max_cost_usd') or 0):.2f}"
    if phase == "collected":
        console.print(f"[green]done[/] {record['run_id']}: artifacts in {record['output']} (checked against the "
                      f"job's receipt); spent {spent}")
        return 0
    if phase == "stopped":  # stopped on request: its checkpoints are collected, the training is not finished
        err_console.print(f"[yellow]stopped[/] {record['run_id']}: artifacts and checkpoints in {record['output']}; "
                          f"continue it with `stateset-agents finetune prepare-resume {record['run_id']} --checkpoint "
                          f"K --workspace DIR --mode exact`; spent {spent}", highlight=False, soft_wrap=True)
        return 1
    err_console.print(f"[red]{phase}[/] {record['run_id']}: {record.get('error') or ''}; spent {spent}",
                      highlight=False)
    return 1


@app.command("train-remote", cls=TrainRemoteCommand)
def train_remote(
    provider_name: Optional[str] = typer.Option(None, "--provider", help="Provider."),
    dataset: Optional[Path] = typer.Option(None, "--dataset", help="curated.jsonl from `improve run`."),
    base_model: Optional[str] = typer.Option(None, "--base-model", help="Base model (hub id or path remotely)."),
    eval_prompts: Optional[Path] = typer.Option(None, "--eval-prompts",
                                                help="Validation prompts (validation.jsonl): every checkpoint is "
                                                     "evaluated on them."),
    init_adapter: Optional[Path] = typer.Option(None, "--init-adapter",
                                                help="Start from a parent run's adapter (RUN/adapter); it travels "
                                                     "with the job."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Hard cap in USD (required to launch)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Provider GPU id or short name (H100, A100-80GB); "
                                                          "default: the provider's, shown in the quote."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs (default 1)."),
    max_hours: Optional[float] = typer.Option(None, "--max-hours", help="Wall-clock limit, enforced remotely."),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="Trainer (objective)."),
    reward: Optional[str] = typer.Option(None, "--reward", help="Reward component for the trainer."),
    reward_file: Optional[Path] = typer.Option(None, "--reward-config", help=REWARD_FILE_HELP),
    config_file: Optional[Path] = typer.Option(None, "--config", help="The shared config (see `finetune schema`)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Run directory for the artifacts."),
    image: Optional[str] = typer.Option(None, "--image", help="Trainer image NAME@sha256:DIGEST (providers that run "
                                                               "images); default: the config's, else the one "
                                                               "`images pin` recorded."),
    plan_only: bool = typer.Option(False, "--plan-only", help="Quote and write the plan; rent nothing. Needs no "
                                                               "credentials where the price needs no API."),
    new_run: bool = typer.Option(False, "--new-run", help="Run the same job again (a fresh run id)."),
    attach_id: Optional[str] = typer.Option(None, "--attach", help="Reattach to RUN_ID or collect it."),
    cancel_id: Optional[str] = typer.Option(None, "--cancel", help="Terminate RUN_ID."),
    detach: bool = typer.Option(False, "--detach", help="Launch and return; --attach later."),
):
    """SPENDS MONEY. Train on a provider under a hard cost cap: quote, refuse above --max-cost, launch (or attach
    to the same job), watch and terminate before the cap, collect checksummed artifacts."""
    import secrets

    from ..remote import config as cfg
    from ..remote import session

    if attach_id or cancel_id:
        run_id = attach_id or cancel_id
        record = session._record(run_id)
        if attach_id and record.get("kind") == "chat":
            from ..core.errors import InputError

            raise InputError(f"{run_id} is a chat session: it cannot be attached (`--cancel {run_id}` terminates "
                             "it)", field="run_id")
        if cancel_id:  # the same operation as `finetune cancel`
            from .. import runs

            done = runs.cancel(run_id)
            console.print(f"cancelled {run_id}; spent ${done.get('spend_usd', 0):.4f}")
            return
        provider = session.open_provider(record["provider"], record.get("provider_config"))
        if record.get("phase") not in session.state.FINAL_PHASES:
            record = _watch(run_id, provider)
        raise typer.Exit(_report(record))
    config: dict[str, Any] = cfg.load(config_file) if config_file else {}
    flags = {"provider": provider_name, "dataset": str(dataset) if dataset else None, "base_model": base_model,
             "eval_prompts": str(eval_prompts) if eval_prompts else None, "max_cost_usd": max_cost, "gpu": gpu,
             "gpus": gpus, "max_hours": max_hours, "algorithm": algorithm, "reward": reward,
             "init_adapter": str(init_adapter) if init_adapter else None, "image": image}
    config.update({k: v for k, v in flags.items() if v is not None})
    algo = config.get("algorithm") or cfg.defaults(cfg.schema()).get("algorithm")
    fields = plugin_fields(f"trainer:{algo}", f"the {algo} objective")
    if fields:  # a plugin's flags are objective fields
        config["training"] = {**(config.get("training") or {}), **fields}
    if reward_file is not None:
        config["reward"], file_config = reward_and_config(config.get("reward"), None, reward_file)
        config["reward_config"] = {**(config.get("reward_config") or {}), **file_config}
    if new_run:
        config["salt"] = secrets.token_hex(8)
    full = cfg.validated(config, source=str(config_file) if config_file else None)
    with session.open_provider(full["provider"], full.get("provider_config")) as provider:
        _quote_first(full, provider, plan_only=plan_only)
        plan = _new_workspace(full, provider, None)
        _notice(plan.get("_notice"))
        err_console.print(f"plan {plan['run_id']}: worst case ${plan['worst_case_usd']:.2f} of the "
                          f"${plan['max_cost_usd']:.2f} cap (re-quoted {plan['quote'].get('quoted_at_iso')}); "
                          f"checksum {plan['checksum']}", highlight=False)
        workspace = Path(plan.get("_workspace") or session.state.state_dir() / "workspaces" / plan["run_id"])
        if plan_only:
            console.print(f"plan written to {workspace / 'plan.json'}; launch it with: stateset-agents finetune "
                          f"launch {workspace}")
            return
        record = session.launch(workspace, provider, output=output)
        _notice(record.get("notice"))
        verb = "attached to the existing" if record.get("attached") else "launched"
        err_console.print(f"{verb} job {record['job'].get('job_id')} for run {record['run_id']}")
        if detach:
            console.print(f"detached; reattach with: stateset-agents train-remote --attach {record['run_id']}")
            return
        raise typer.Exit(_report(_watch(record["run_id"], provider)))


@finetune_app.command("schema")
def finetune_schema():
    """Print the JSON schema of the config `finetune` and `train-remote` share (the installed providers and
    trainers included)."""
    from ..remote.config import schema

    _print_json(schema())


@finetune_app.command("validate")
def finetune_validate(config_file: Path = typer.Option(..., "--config", help="Config file (YAML/JSON).")):
    """Report every error in a config, each with its field path."""
    from ..remote import config as cfg

    errors = cfg.validation_errors(cfg.load(config_file))
    for where, message in errors:
        err_console.print(f"{config_file}: {where}: {message}", highlight=False, soft_wrap=True)
    if errors:
        raise typer.Exit(2)
    console.print(f"{config_file}: valid")


@finetune_app.command("prepare")
def finetune_prepare(config_file: Path = typer.Option(..., "--config"),
                     workspace: Path = typer.Option(..., "--workspace", help="Private directory for the plan.")):
    """Quote (refusing above the cap), resolve the image, snapshot the dataset and config, and write the plan, as
    `train-remote --plan-only` does. Rents nothing."""
    from ..remote import config as cfg
    from ..remote import session

    full = cfg.validated(cfg.load(config_file), source=str(config_file))
    with session.open_provider(full["provider"], full.get("provider_config")) as provider:
        _quote_first(full, provider, plan_only=True)
        plan = session.prepare(full, workspace, provider)
    _notice(plan.get("_notice"))
    _plan_table(plan)
    console.print(f"plan written to {workspace / 'plan.json'}")


@finetune_app.command("launch")
def finetune_launch(workspace: Path = typer.Argument(..., help="A workspace from `finetune prepare`."),
                    output: Optional[Path] = typer.Option(None, "--output", help="Run directory."),
                    detach: bool = typer.Option(False, "--detach", help="Launch and return.")):
    """SPENDS MONEY. Launch a prepared plan (refused if it was edited after prepare), then watch it under its cap."""
    from ..remote import session
    from ..remote.plan import load_verified

    plan = load_verified(workspace)
    with session.open_provider(plan["provider"], plan["config"].get("provider_config")) as provider:
        record = session.launch(workspace, provider, output=output)
        _notice(record.get("notice"))
        if detach:
            console.print(f"launched {record['run_id']}; reattach with: stateset-agents train-remote --attach "
                          f"{record['run_id']}")
            return
        raise typer.Exit(_report(_watch(record["run_id"], provider)))


@app.command("chat-remote", cls=ChatRemoteCommand)
def chat_remote(
    provider_name: str = typer.Option(..., "--provider", help="A provider that chats."),
    run_id: str = typer.Option(..., "--run", help="A collected run."),
    max_cost: float = typer.Option(..., "--max-cost", help="Hard cap in USD for this chat session."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Default: the run's GPU on the same provider."),
    max_minutes: float = typer.Option(30.0, "--max-minutes", help="Wall-clock limit, enforced remotely."),
    max_turns: int = typer.Option(50, "--max-turns", help="Replies at most (prices token-billed providers)."),
    image: Optional[str] = typer.Option(None, "--image", help="Trainer image NAME@sha256:DIGEST (providers that "
                                                               "run images); default: the run's own."),
    system: Optional[str] = typer.Option(None, "--system", help="A system message to start with."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Default 0.7."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Default 256."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Default 0."),
    poll_s: float = typer.Option(15.0, "--poll-seconds", help="How often the watchdog asks the provider."),
):
    """SPENDS MONEY. Chat with a collected run's adapter on a provider under its own cap: quote and refuse above
    --max-cost before anything is rented, a remote deadline, a watchdog that ends the session before the cap, the
    resource terminated on exit, Ctrl-C or error, and the spend booked in the ledger (kind chat). The conversation
    is `stateset-agents chat`'s own loop, over stdin/stdout."""
    from ..remote import session
    from ..remote.chat import ChatSession, SessionEnded
    from .evidence_cmd import _decoding, chat_loop

    from ..core.jsonio import load_json
    from ..core.registry import get_registry

    get_registry().require(provider_name, "provider", "chat", "chat-remote")
    record = session._record(run_id)
    same = record.get("provider") == provider_name
    plan_path = Path(record.get("workspace") or "") / "plan.json"
    plan = load_json(plan_path) if same and plan_path.is_file() else {}
    if image is None and "@sha256:" in str((plan.get("image") or {}).get("ref", "")):
        image = plan["image"]["ref"]
    if gpu is None and plan:
        gpu = plan["gpu"]["id"]

    def tick(status: dict[str, Any]) -> None:
        if not status.get("ready"):
            err_console.print(f"[dim]{run_id} chat: {status.get('state')} · spent ${status.get('accrued_usd', 0):.4f}"
                              "[/]", highlight=False)

    with session.open_provider(provider_name, record.get("provider_config") if same else None) as provider:
        chat = ChatSession(provider, provider_name, run_id, max_cost=max_cost, max_minutes=max_minutes, gpu=gpu,
                           image=image, max_turns=max_turns, decoding=_decoding(temperature, max_new_tokens, seed),
                           on_tick=tick, poll_s=poll_s)
        chat.open()
        err_console.print(f"chat session {chat.session_id} on {provider_name}: worst case "
                          f"${chat.worst_case:.2f} of the ${chat.cap:.2f} cap", highlight=False)
        outcome, code = "chatted", 0
        try:
            chat_loop(chat, {}, system=system, metadata={"source": "stateset-agents chat-remote", "run_id": run_id,
                                                         "provider": provider_name})
        except SessionEnded as exc:
            err_console.print(f"[red]{exc}[/]", highlight=False)
            outcome, code = exc.outcome, exc.exit_code
        except KeyboardInterrupt:
            outcome, code = "interrupted", 130
        except BaseException:
            outcome = "failed"
            raise
        finally:
            closed = chat.close(outcome)
            err_console.print(f"chat session closed ({closed.get('phase')}): spent "
                              f"${float(closed.get('spend_usd') or 0):.4f} of ${chat.cap:.2f}", highlight=False)
        if code:
            raise typer.Exit(code)


@app.command("costs", cls=CostsCommand)
def costs(
    orphans: bool = typer.Option(False, "--orphans", help="List live jobs nobody is watching (reads only)."),
    clean_orphans: bool = typer.Option(False, "--clean-orphans", help="Terminate them (stops spending)."),
    provider_names: Optional[str] = typer.Option(None, "--providers", help="Comma list of providers to check."),
    as_json: bool = typer.Option(False, "--json"),
):
    """The local ledger of what remote jobs spent; with --orphans, live jobs that nobody is responsible for."""
    from ..remote import session, state

    if orphans or clean_orphans:
        if provider_names is None:
            from ..core.errors import InputError
            from ..core.registry import get_registry

            provider_names = get_registry().default("provider", face="train-remote")
            if provider_names is None:
                raise InputError("name the providers to check with --providers", field="providers")
        providers = {n: session.open_provider(n) for n in provider_names.split(",") if n}
        try:
            found = session.clean_orphans(providers) if clean_orphans else session.orphans(providers)
        finally:
            for p in providers.values():
                p.close()
        if as_json:
            return _print_json(found)
        verb = "terminated" if clean_orphans else "orphan"
        for job in found:
            console.print(f"{verb}: {job['provider']} {job['run_id']} ({job.get('job_id')}): {job['why']}")
        if not found:
            console.print("no orphans")
        return
    rows = state.read_ledger()
    if as_json:
        return _print_json(rows)
    from rich.table import Table

    t = Table(title=f"spend ledger ({state.ledger_path()})")
    for col in ("run", "provider", "kind", "outcome", "spent USD", "cap USD"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r.get("run_id")), str(r.get("provider")), str(r.get("kind")), str(r.get("outcome")),
                  f"{float(r.get('spend_usd') or 0):.4f}", str(r.get("max_cost_usd") or ""))
    console.print(t)
    console.print(f"total: ${sum(float(r.get('spend_usd') or 0) for r in rows):.4f}")
