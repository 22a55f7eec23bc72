"""`stateset-agents`: the command-line face. Each command lives in a small module that attaches to `app`."""
from __future__ import annotations

import sys

from .app import app, err_console

# Command modules register themselves on import; keep them light (heavy imports inside the command bodies).
_COMMAND_MODULES = ("plugins_cmd", "ingest_cmd", "improve_cmd", "train_cmd")


def _load_commands() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise


def main(argv: list[str] | None = None) -> int:
    from ..errors import StatesetError

    _load_commands()
    try:
        rc = app(args=argv, prog_name="stateset-agents", standalone_mode=False)
        if isinstance(rc, int):
            return rc
    except StatesetError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # click's usage errors and aborts
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Exit):
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            err_console.print("aborted")
            return 1
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
