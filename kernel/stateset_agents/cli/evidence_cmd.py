"""`evaluate`, `gate`, `deploy`, `lineage`, `report`, `chat`: the evidence commands. Each parses its flags, calls
`pipeline.*` or an `evaluator:*` component, and renders; heavy imports stay inside the command bodies."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer

from .app import app, console, err_console
from .options import REWARD_FILE_HELP, eval_protocol, reward_and_config
from ..formatting import fmt as _fmt




def evaluator_for(capability: str) -> str:
    """The evaluator component that does `capability` ("paired", "judge", "chat"): found by what it declares."""
    from ..pipeline.evaluation import evaluator_for as found

    return found(capability)


def _decoding(temperature, max_new_tokens, seed) -> dict[str, Any]:
    return {k: v for k, v in (("temperature", temperature), ("max_new_tokens", max_new_tokens), ("seed", seed))
            if v is not None}


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=True)


def _render_statistics(title: str, results: dict[str, Any]) -> None:
    from rich.table import Table

    s, totals, trunc = results.get("statistics") or {}, results.get("totals") or {}, results.get("truncation") or {}
    interval = s.get("interval") or {}
    table = Table(title=title, show_header=False)
    table.add_row("cases", str(totals.get("cases")))
    table.add_row("base mean -> adapter mean",
                  f"{_fmt(totals.get('base_mean'))} -> {_fmt(totals.get('candidate_mean'))}")
    table.add_row("mean difference [95% interval]",
                  f"{_fmt(s.get('mean_difference'))} [{_fmt(interval.get('low'))}, {_fmt(interval.get('high'))}]")
    table.add_row("p-value (sign-flip, two-sided)", f"{_fmt(s.get('p_value'), 4)}")
    table.add_row("improved / regressed / same",
                  f"{totals.get('improved')} / {totals.get('regressed')} / {totals.get('unchanged')}")
    protocol = results.get("protocol") or {}
    if protocol:
        shown = ("greedy" if protocol.get("decoding") == "greedy" else
                 f"{protocol.get('samples')} sample(s) at temperature {protocol.get('temperature')}")
        table.add_row("protocol", f"{shown}, up to {protocol.get('max_new_tokens')} new tokens, truncation "
                                  f"{'= failure' if protocol.get('truncation') == 'failure' else 'graded'}")
    table.add_row("truncated answers, cases (base / adapter)",
                  f"{_fmt(trunc.get('base'))} / {_fmt(trunc.get('candidate'))} of {totals.get('cases')}")
    complete = results.get("complete_cases") or {}
    if complete.get("statistics"):
        cs = complete["statistics"]
        table.add_row("gain on cases neither side cut",
                      f"{_fmt(cs.get('mean_difference'))} over {complete.get('cases')} cases, p "
                      f"{_fmt(cs.get('p_value'), 4)}")
    spread = results.get("sample_spread")
    if spread:
        table.add_row("per-case sd over samples (base / adapter)",
                      f"{_fmt(spread['base']['mean_sd'])} / {_fmt(spread['candidate']['mean_sd'])} (mean)")
    worst = (results.get("regressions") or [])[:5]
    if worst:
        table.add_row("worst regressions", ", ".join(f"{r['id']} ({r['difference']:+.3f})" for r in worst))
    console.print(table)


# ------------------------------------------------------------------------------------------------------- evaluate


@app.command()
def evaluate(
    adapter: Optional[Path] = typer.Option(None, "--adapter",
                                           help="Adapter directory (RUN/adapter, a checkpoint's, a registry entry's)."),
    run: Optional[Path] = typer.Option(None, "--run", help="A run directory: its final adapter, or with --split test "
                                                           "its nominated checkpoint."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Held-out prompts: .txt (one a line) or .jsonl."),
    reward: Optional[str] = typer.Option(None, "--reward", help="Reward component: NAME or reward:NAME."),
    output: Optional[Path] = typer.Option(None, "--output", help="Folder for eval_results.json (with --split test: "
                                                                 "default RUN/test/step-K)."),
    judge: Optional[Path] = typer.Option(None, "--judge", help="Benchmarking: also judge the answers pairwise with "
                                                               "this local model (directory or .gguf), both orders."),
    rubric: Optional[Path] = typer.Option(None, "--rubric", help="With --judge: the rubric (text file)."),
    replay: Optional[Path] = typer.Option(None, "--replay", help="Re-run the judge prompts recorded in DIR's "
                                                                 "judge_results.json; report every changed verdict."),
    split: Optional[str] = typer.Option(None, "--split", help="validation or test. test: the nominated checkpoint "
                                                              "of --run, one look (recorded in the run)."),
    again: bool = typer.Option(False, "--again", help="With --split test: look again at a checkpoint already "
                                                      "looked at (recorded)."),
    base_model: Optional[str] = typer.Option(None, "--base-model",
                                             help="Default: the base model the adapter's run trained on."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Policy file (YAML/JSON) for the reward."),
    reward_file: Optional[Path] = typer.Option(None, "--reward-config", help=REWARD_FILE_HELP),
    dataset: Optional[Path] = typer.Option(None, "--dataset",
                                           help="Training rows to check for overlap (default: the run's dataset)."),
    drop_overlap: bool = typer.Option(False, "--drop-overlap",
                                      help="Drop held-out cases the training data contains instead of refusing."),
    samples: Optional[int] = typer.Option(None, "--samples", help="Answers per case (default 1; more needs "
                                                                  "--temperature > 0); a case scores their mean."),
    temperature: Optional[float] = typer.Option(None, "--temperature",
                                                help="Evaluation temperature (default 0: greedy, whatever the run "
                                                     "trained with)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens",
                                                 help="Answer length cap (default 256); a cut answer is a failure."),
    allow_truncation: bool = typer.Option(False, "--allow-truncation",
                                          help="Grade cut answers instead of failing them."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampling seed (default 0; greedy ignores it)."),
    runtime: str = typer.Option("inprocess", "--runtime", help="Where the evaluator runs."),
    reward_runtime: str = typer.Option("inprocess", "--reward-runtime", help="Where the reward runs."),
):
    """Paired held-out evaluation: base model vs adapter on the same cases, one protocol and one reward."""
    from ..core.errors import InputError
    from ..pipeline.evaluation import run_evaluate

    if replay is not None:
        _judge_replay(replay, runtime)
        return
    if prompts is None:
        raise InputError("--prompts is required", field="prompts")
    if (judge is None) != (rubric is None):
        raise InputError("--judge and --rubric go together", field="judge")
    reward, reward_config = reward_and_config(reward, policy, reward_file)
    with _progress() as progress:
        task = progress.add_task("evaluating", total=None)
        done = run_evaluate(prompts=prompts, reward=reward, reward_config=reward_config, adapter=adapter, run=run,
                            output=output, split=split, again=again, base_model=base_model, dataset=dataset,
                            drop_overlap=drop_overlap,
                            protocol=eval_protocol(samples, temperature, max_new_tokens, seed, allow_truncation),
                            runtime=runtime, reward_runtime=reward_runtime,
                            on_event=lambda event: _show_event(progress, task, event))
    last, title = done["completed"], done["title"]
    _render_statistics(title, last["results"])
    console.print(f"wrote {last['output']}")
    if judge is not None:
        _judge_answers(Path(last["output"]), judge, rubric, runtime)


def _run_judge(request: dict[str, Any], runtime: str) -> dict[str, Any]:
    return _run_evaluator(evaluator_for("judge"), request, runtime, "judging", "judging")


def _show_event(progress, task, event: dict[str, Any]) -> None:
    if event.get("type") == "progress":
        progress.update(task, completed=event["step"], total=event["total"])
    elif event.get("type") == "log":
        err_console.print(event.get("message", ""), highlight=False)


def _run_evaluator(component: str, request: dict[str, Any], runtime: str, doing: str,
                   what: str) -> dict[str, Any]:
    """Run an evaluator with a progress bar (its log events printed); its completed event, or an error."""
    from ..pipeline.evaluation import run_component

    with _progress() as progress:
        task = progress.add_task(doing, total=None)
        return run_component(component, request, runtime, what, lambda event: _show_event(progress, task, event))


def _judge_answers(results: Path, judge: Path, rubric: Path, runtime: str) -> None:
    done = _run_judge({"results": str(results), "judge": str(judge), "rubric": str(rubric),
                       "output": str(results.parent)}, runtime)
    s = done["results"]["summary"]
    console.print(f"judge (both orders, a win only when both agree): {s['win']} wins, {s['loss']} losses, "
                  f"{s['tie']} ties, {s['undecided']} undecided of {s['cases']}; verdict kept when the order was "
                  f"reversed: {_fmt(s['consistency'])}; first answer preferred {_fmt(s['first_position_rate'])} of "
                  f"passes; p {_fmt(s['p_value'], 4)}", highlight=False)
    console.print(f"wrote {done['output']}")


def _judge_replay(directory: Path, runtime: str) -> None:
    report = _run_judge({"replay": str(directory)}, runtime)["results"]
    j = report["judge"]
    if j["weights_changed"]:
        err_console.print(f"[yellow]the judge's weights changed:[/] sha256 {j['recorded_weights_sha256'][:12]}... "
                          f"recorded, {j['weights_sha256'][:12]}... now", highlight=False)
    for c in report["changed"]:
        console.print(f"  {c['id']} pass {c['pass']} ({' vs '.join(c['order'])}): {c['recorded']} -> {c['now']}"
                      + ("" if c["verdict_changed"] else " (same verdict, other words)"), highlight=False)
    console.print(f"{report['changed_verdicts']} of {report['prompts']} verdicts changed on replay", highlight=False)
    if report["changed_verdicts"] or j["weights_changed"]:
        raise typer.Exit(1)


@app.command()
def nominate(
    run: Path = typer.Argument(..., help="A run directory."),
    checkpoint: int = typer.Option(..., "--checkpoint", help="The checkpoint's step (see manifest.json `selection`)."),
):
    """Record the checkpoint to test (chosen on validation; the final one is not automatically the best)."""
    from ..pipeline.nomination import nominate as record_nomination

    record = record_nomination(run, checkpoint)
    v = record.get("validation") or {}
    console.print(f"nominated checkpoint {record['step']} of {run} (adapter sha256 {record['adapter']['sha256']}; "
                  f"validation mean {_fmt(v.get('candidate_mean'))}, best on validation: "
                  f"{record.get('best_on_validation')})", highlight=False)
    if record["after_test_looks"]:
        err_console.print(f"[yellow]note:[/] {record['after_test_looks']} test look(s) were already taken in this "
                          "run; the nomination records it", highlight=False)


# ----------------------------------------------------------------------------------------------------------- gate


@app.command()
def gate(
    runs: List[Path] = typer.Option(..., "--runs", help="Run directories of one configuration, one per seed."),
    more_runs: Optional[List[Path]] = typer.Argument(None, help="More run directories (after --runs A B C ...).",
                                                     show_default=False),
    prompts: Path = typer.Option(..., "--prompts", help="Held-out prompts: .txt or .jsonl."),
    reward: Optional[str] = typer.Option(None, "--reward", help="Reward component: NAME or reward:NAME."),
    output: Path = typer.Option(..., "--output", help="Folder for promotion.json and the evaluations."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Policy file (YAML/JSON) for the reward."),
    reward_file: Optional[Path] = typer.Option(None, "--reward-config", help=REWARD_FILE_HELP),
    min_seeds: int = typer.Option(6, "--min-seeds", help="Distinct seeds required."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level of the sign-flip test."),
    tolerance: float = typer.Option(0.2, "--tolerance", help="Largest allowed fall of any case's mean score."),
    runtime: str = typer.Option("inprocess", "--runtime", help="Where the evaluator runs."),
    reward_runtime: str = typer.Option("inprocess", "--reward-runtime", help="Where the reward runs."),
):
    """Promote a configuration only with enough seeds, a significant paired gain, and no case-level regression."""
    from rich.table import Table

    from ..pipeline.gate import run_gate

    all_runs = list(runs) + list(more_runs or [])
    reward, reward_config = reward_and_config(reward, policy, reward_file)
    with _progress() as progress:
        task = progress.add_task("gating", total=None)

        def on_event(run, event):
            if event.get("type") == "progress":
                progress.update(task, description=f"evaluating {run['path'].name}", completed=event["step"],
                                total=event["total"])

        record = run_gate(all_runs, prompts, reward, output, min_seeds=min_seeds, alpha=alpha, tolerance=tolerance,
                          reward_config=reward_config, reward_runtime=reward_runtime,
                          evaluator_runtime=runtime, on_event=on_event)
    table = Table(title="promotion gate", show_header=True)
    table.add_column("condition")
    table.add_column("result")
    table.add_column("detail")
    for c in record["conditions"]:
        table.add_row(c["name"], "[green]pass[/]" if c["passed"] else "[red]FAIL[/]", c["detail"])
    console.print(table)
    for run in record["runs"]:
        d = run["descriptive"]
        console.print(f"  {run['path']} (seed {run['seed']}): mean difference {_fmt(d.get('mean_difference'))}, "
                      f"p {_fmt(d.get('p_value'), 4)} [descriptive]", highlight=False)
    console.print(f"wrote {output / 'promotion.json'}")
    if not record["promoted"]:
        err_console.print(f"[red]not promoted:[/] failed {', '.join(record['failed_conditions'])}", highlight=False)
        raise typer.Exit(1)
    console.print("[green]promoted[/]")


# --------------------------------------------------------------------------------------------------------- deploy


@app.command()
def deploy(
    run: Path = typer.Argument(..., help="A run directory."),
    to: Path = typer.Option(..., "--to", help="Registry folder; the entry goes to REGISTRY/NAME."),
    name: Optional[str] = typer.Option(None, "--name", help="Entry name (default: the run directory's name)."),
    promotion: Optional[Path] = typer.Option(None, "--promotion", help="promotion.json (default: RUN/promotion.json)."),
    force: bool = typer.Option(False, "--force", help="Deploy an unpromoted run (recorded in the entry)."),
):
    """Copy a promoted run's adapter, manifest and promotion.json into a registry, atomically."""
    from ..pipeline.deploy import deploy as deploy_run

    entry = deploy_run(run, to, name=name, force=force, promotion=promotion)
    if entry["forced"]:
        err_console.print(f"[yellow]forced:[/] {entry['force_reason']}", highlight=False)
    console.print(f"deployed {run} -> {entry['path']} (adapter sha256 {entry['adapter_sha256']})", highlight=False)


# -------------------------------------------------------------------------------------------------------- lineage


def _print_chain(chain: dict[str, Any], max_rows: int) -> None:
    manifest, adapter, dataset = chain.get("manifest") or {}, chain.get("adapter") or {}, chain.get("dataset") or {}
    mark = {True: "[green]verified[/]", False: "[red]CHANGED[/]", None: "[yellow]not verified[/]"}

    def out(text: str) -> None:  # never wrapped: paths and digests stay whole, one link of the chain a line
        console.print(text, highlight=False, soft_wrap=True)

    out(f"[bold]{chain['target']}[/] ({chain['kind']})")
    out(f"adapter  sha256 {adapter.get('sha256')} {mark[adapter.get('verified')]}")
    out(f"  -> manifest {manifest.get('path')} sha256 {manifest.get('sha256')}")
    out(f"     run {manifest.get('run_id')}, {manifest.get('algorithm')}, seed {manifest.get('seed')}, "
        f"{manifest.get('committed_updates')} committed updates, config {str(manifest.get('config_digest'))[:16]}")
    out(f"     base model {manifest.get('base_model')} (revision {manifest.get('base_model_revision')})")
    totals = (manifest.get("eval_summary") or {}).get("totals") or {}
    if totals:
        out(f"     eval: base {_fmt(totals.get('base_mean'))} -> adapter {_fmt(totals.get('candidate_mean'))} over "
            f"{totals.get('cases')} cases")
    receipts = chain.get("receipts")
    if receipts:  # a run directory: its update receipts and whether it is quarantined
        out(f"     receipts: {receipts['committed']} committed of {receipts['attempted']} attempted updates "
            f"{mark[receipts['verified']]}; state {receipts['state']}")
        held = receipts.get("quarantine")
        if held:
            out(f"     [red]QUARANTINED[/] ({held.get('reason')} at update {held.get('step')}, last good checkpoint "
                f"{held.get('last_good_checkpoint')}): never deployed, nominated or gated; `train --reload`")
        for old in receipts.get("resolved") or []:
            res = old.get("resolution") or {}
            out(f"     quarantine resolved: {old.get('reason')} at update {old.get('step')} -> reloaded "
                f"{res.get('checkpoint')}")
    promotion = chain.get("promotion")
    out("     promotion: " + ("none" if promotion is None else "promoted" if promotion.get("promoted") else
                             f"not promoted ({', '.join(promotion.get('failed_conditions') or [])})"))
    if chain.get("deployment"):
        dep = chain["deployment"]
        out(f"     deployed {dep.get('deployed_at')} as {dep.get('name')}" + (" [yellow](forced)[/]"
                                                                          if dep.get("forced") else ""))
    out(f"  -> dataset {dataset.get('path')} sha256 {dataset.get('sha256')} ({dataset.get('rows')} rows) "
        f"{mark[dataset.get('verified')]}")
    rows = chain.get("rows") or []
    for row in rows[:max_rows]:
        out(f"     row line {row['dataset_line']} -> conversation {row['conversation_id']} (turn "
            f"{row['turn_index']}) -> {row['source_path']} sha256 {str(row['source_sha256'])[:16]} line {row['line']}")
    if len(rows) > max_rows:
        out(f"     ... {len(rows) - max_rows} more rows (--rows N shows more, --json all)")
    for path, src in (chain.get("sources") or {}).items():
        out(f"  -> log {path} sha256 {src.get('sha256')} {mark[src.get('verified')]}")
    for w in chain.get("warnings") or []:
        err_console.print(f"[yellow]warning:[/] {w['path']}: {w['message']}")


@app.command()
def lineage(
    targets: List[Path] = typer.Argument(..., help="Run directories or registry entries (or folders of them)."),
    conversation: Optional[str] = typer.Option(None, "--conversation",
                                               help="Which adapters did this conversation train?"),
    as_json: bool = typer.Option(False, "--json", help="Print the chain as JSON."),
    rows: int = typer.Option(20, "--rows", help="Training rows to print per target."),
):
    """Walk an adapter back to its log lines, verifying every recorded sha256 (exit 4 when one differs)."""
    import orjson

    from ..pipeline.lineage import adapters_trained_on, expand_targets, trace

    if conversation is not None:
        hits = adapters_trained_on(targets, conversation)
        if as_json:
            typer.echo(orjson.dumps(hits, option=orjson.OPT_INDENT_2).decode())
        for hit in hits:
            lines = ", ".join(f"dataset line {r.get('dataset_line')} (log {r.get('source_path')}:{r.get('line')})"
                              for r in hit["rows"])
            if not as_json:
                console.print(f"{hit['target']}: adapter {hit['adapter_sha256']} (run {hit['run_id']}"
                              f"{', deployed' if hit['deployed'] else ''}) <- {lines}", highlight=False)
        if not hits:
            err_console.print(f"no adapter among {len(expand_targets(targets))} target(s) trained on conversation "
                              f"{conversation!r}", highlight=False)
            raise typer.Exit(1)
        return
    results = [trace(t) for t in targets]
    if as_json:
        typer.echo(orjson.dumps([r.as_dict() for r in results], option=orjson.OPT_INDENT_2).decode())
    else:
        for result in results:
            _print_chain(result.as_dict(), rows)
    for result in results:
        result.raise_if_broken()


# --------------------------------------------------------------------------------------------------------- report


@app.command()
def report(run: Path = typer.Argument(..., help="A run directory.")):
    """Write RUN/report.html: curves, score distributions, per-case changes, lineage. Self-contained."""
    from ..pipeline.report import write_report

    console.print(f"wrote {write_report(run)}")


# ----------------------------------------------------------------------------------------------------------- chat


def _read_turns(interactive: bool):
    """User lines: prompted on a terminal, else read from stdin as they come."""
    if interactive:
        while True:
            try:
                yield input("you> ")
            except EOFError:
                return
    else:
        for line in sys.stdin:
            yield line.rstrip("\n")


def _save_transcript(path: Path, history: list[dict[str, Any]], metadata: dict[str, Any]) -> str:
    """Append the conversation to FILE as one line of the ingest format; returns its id."""
    import orjson

    from ..core.jsonio import atomic_write, digest

    conversation_id = f"chat-{digest(history)[:16]}"
    line = orjson.dumps({"id": conversation_id, "messages": history, "tools": [], "metadata": metadata},
                        option=orjson.OPT_APPEND_NEWLINE)
    before = path.read_bytes() if path.exists() else b""
    if before and not before.endswith(b"\n"):
        before += b"\n"
    with atomic_write(path) as f:  # a crash leaves the old transcript file, never half a line
        f.write(before + line)
    return conversation_id


@app.command()
def chat(
    base_model: Optional[str] = typer.Option(None, "--base-model",
                                             help="Default: the adapter's base model, else the offline default."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="Adapter directory (omit: the base model)."),
    reward: Optional[str] = typer.Option(None, "--reward", help="Grade each reply live with this reward."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Policy file (YAML/JSON) for the reward."),
    system: Optional[str] = typer.Option(None, "--system", help="A system message to start with."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Default 0.7."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Default 256."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Default 0."),
    runtime: str = typer.Option("inprocess", "--runtime", help="Where the model runs (the chat evaluator)."),
):
    """Talk to the base model or an adapter. /reset starts over, /save FILE appends the transcript (ingest format),
    /quit ends. Reads stdin when it is not a terminal."""
    from ..core.runtimes import load_component

    settings = {"base_model": base_model, "adapter": str(adapter) if adapter else None,
                **_decoding(temperature, max_new_tokens, seed)}
    with load_component(evaluator_for("chat"), runtime=runtime) as model:
        chat_loop(model, settings, system=system, reward=reward, policy=policy,
                  metadata={"source": "stateset-agents chat", "base_model": base_model,
                            "adapter": settings["adapter"]})


def chat_loop(model, settings: dict[str, Any], *, system: Optional[str] = None, reward: Optional[str] = None,
              policy: Optional[Path] = None, metadata: Optional[dict[str, Any]] = None) -> None:
    """The conversation over stdin/stdout with `model`: anything whose `run(request)` yields the chat evaluator's
    events for {**settings, "messages": history} (the component in any runtime, or a remote chat session)."""
    import contextlib

    from ..core.components import GradeItem
    from ..core.errors import StatesetError
    from ..core.runtimes import load_component

    interactive = sys.stdin.isatty()
    start = [{"role": "system", "content": system}] if system else []
    history: list[dict[str, Any]] = list(start)
    grades: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        grader = stack.enter_context(load_component(reward if ":" in reward else f"reward:{reward}",
                                                    config=reward_and_config(reward, policy, None)[1])) \
            if reward else None
        if interactive:
            err_console.print("chat: /reset, /save FILE, /quit", highlight=False)
        for text in _read_turns(interactive):
            if not text.strip():
                continue
            command, _, argument = text.strip().partition(" ")
            if command in ("/quit", "/exit"):
                break
            if command == "/reset":
                history, grades = list(start), []
                console.print("(conversation reset)")
                continue
            if command == "/save":
                if not argument.strip():
                    err_console.print("usage: /save FILE")
                    continue
                cid = _save_transcript(Path(argument.strip()), history, {**(metadata or {}), "grades": grades})
                console.print(f"(saved {cid} to {argument.strip()})", highlight=False)
                continue
            history.append({"role": "user", "content": text})
            last: dict[str, Any] = {}
            for event in model.run({**settings, "messages": history}):
                last = event
            if last.get("type") != "completed":
                history.pop()
                message = last.get("message") or "no reply"
                if not interactive:
                    raise StatesetError(f"chat failed: {message}")
                err_console.print(f"[red]error:[/] {message}", highlight=False)
                continue
            reply = last["message"]
            history.append(reply)
            shown = last.get("text") or ""
            if reply.get("tool_calls"):
                shown += " " + " ".join(f"[tool call {c['function']['name']}({c['function']['arguments']})]"
                                        for c in reply["tool_calls"])
            typer.echo(f"assistant> {shown.strip()}" + (" [truncated]" if last.get("truncated") else ""))
            if grader is not None:
                conversation = {"id": "chat", "messages": history, "tools": [], "metadata": {}}
                grade = grader.grade([GradeItem(conversation, turns=[len(history) - 1])])[0]
                grades.append({"turn_index": len(history) - 1, "score": grade["score"],
                               "applicable": grade["applicable"], "reason": grade["reason"]})
                typer.echo(f"  [{grade['reward'].get('name')} score {grade['score']:.3f}"
                           f"{'' if grade['applicable'] else ', not applicable'}] {grade['reason']}")
