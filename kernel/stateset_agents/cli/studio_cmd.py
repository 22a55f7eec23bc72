"""`stateset-agents studio [WORKSPACE]`: the Textual studio (docs/studio.md). Textual is imported only here, inside
the command, so `--help` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .app import app


@app.command("studio")
def studio(workspace: Path = typer.Argument(Path("."), help="A folder holding `improve run` outputs; the studio "
                                                            "keeps its config, plans and runs in WORKSPACE/studio."),
           attach: Optional[str] = typer.Option(None, "--attach", help="Open on a run: its run directory (any "
                                                                         "run, `train`'s too) or its run id.")):
    """Plan, review, launch and watch local SFT/GRPO/GSPO/DAPO runs (and remote ones under a cap) in one screen."""
    from ..core.errors import InputError, StatesetError

    try:
        from ..studio.app import run
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("textual", "textual_plotext"):
            raise StatesetError(f"the studio needs {exc.name}: pip install 'stateset-agents[studio]'") from None
        raise
    if not workspace.is_dir():
        raise InputError("not a folder (the studio's workspace is a folder holding `improve run` outputs)",
                         path=str(workspace))
    run(workspace.resolve(), attach=attach)
