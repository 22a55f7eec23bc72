"""`stateset-agents industry list | show NAME | prepare NAME | audit DIR`: domain recipes (docs/industry.md)."""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from .app import Group, app, console

industry_app = typer.Typer(help="Industry recipes: a domain's tools, policy, reward configs and a first dataset "
                                "with split roles.", no_args_is_help=True, cls=Group)
app.add_typer(industry_app, name="industry")


def _print_json(obj) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode() + "\n")


@industry_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")):
    """The installed recipes (each a plugin's), with the package that ships it."""
    from ..pipeline.industry import list_recipes

    rows = list_recipes()
    if as_json:
        _print_json({"recipes": rows})
        return
    from rich.table import Table

    table = Table(title="Industry recipes")
    for column in ("recipe", "version", "package", "summary"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r["name"], r["version"], r["package"], r["summary"])
    console.print(table)
    if not rows:
        console.print("no recipe is installed (a plugin registers one with register_recipes)")


@industry_app.command("show")
def show(name: str = typer.Argument(..., help="The recipe (see `industry list`)."),
         as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")):
    """A recipe's tools, policy rules, reward configs and policy text."""
    from ..pipeline.industry import describe

    info = describe(name)
    if as_json:
        _print_json(info)
        return
    console.print(f"[bold]{info['name']}[/] {info['version']} ({info['package']}): {info['summary']}",
                  highlight=False)
    console.print("tools: " + ", ".join(t["name"] for t in info["tools"]), highlight=False)
    policy = info["policy"]
    console.print(f"policy: {policy['name']} {policy['version']}, {len(policy['rules'])} rules: "
                  + ", ".join(policy["rules"]), highlight=False, soft_wrap=True)
    console.print("rewards: " + ", ".join(r["reward"] + (" (+ policy)" if r["policy"] else "")
                                          for r in info["rewards"]), highlight=False)
    console.print()
    console.print(info["policy_text"].rstrip(), highlight=False, markup=False, soft_wrap=True)


@industry_app.command("prepare")
def prepare(name: str = typer.Argument(..., help="The recipe (see `industry list`)."),
            output: Path = typer.Option(..., "--output", help="The bundle's folder (written whole, or not at all)."),
            size: int = typer.Option(200, "--size", help="Conversations to generate (at least 10)."),
            seed: int = typer.Option(0, "--seed", help="Generator seed: the same seed gives the same bytes."),
            overwrite: bool = typer.Option(False, "--overwrite", help="Replace a bundle already in --output.")):
    """Write a bundle: train/, validation/ and test/ split by customer (roles recorded in every row), the policy,
    tools and reward configs, an overlap audit, and a README with the loop's commands. The conversations are
    generated: for starting and smoke-testing only, never for reward-validity or evidence figures."""
    from ..pipeline.industry import loop_commands, load_recipe, prepare as run_prepare

    record = run_prepare(name, output, size=size, seed=seed, overwrite=overwrite)
    s = record["splits"]
    console.print(f"wrote {output}: " + ", ".join(f"{role} {s[role]['conversations']} conversations "
                                                  f"({s[role]['customers']} customers)" for role in s),
                  highlight=False, soft_wrap=True)
    console.print("overlap audit passed (exact and normalised); generated data: for starting and smoke-testing "
                  "only", highlight=False)
    console.print(f"next, from {output}:", highlight=False)
    for line in loop_commands(record, load_recipe(name)[1]):
        console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)


@industry_app.command("audit")
def audit(directory: Path = typer.Argument(..., help="A bundle folder (`industry prepare`'s output)."),
          as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")):
    """Check a bundle's splits again: roles recorded, no customer or id in two roles, no held-out prompt or
    opening repeated in another role (exact or normalised). Exit status 2 on leakage."""
    from ..pipeline.industry import audit_bundle

    report = audit_bundle(directory)
    if as_json:
        _print_json(report)
        return
    console.print(f"audit passed: {report['conversations']} conversations, {report['prompts']} held-out prompts",
                  highlight=False)
