"""`stateset-agents`: the command-line face. Each command lives in a small module that attaches to `app`."""
from __future__ import annotations

import sys

from .app import app, err_console

# Command modules register themselves on import; keep them light (heavy imports inside the command bodies).
_COMMAND_MODULES = ("plugins_cmd", "ingest_cmd", "improve_cmd", "train_cmd", "quickstart_cmd", "evidence_cmd", "images_cmd", "remote_cmd",
                    "finetune_cmd", "benchmark_cmd", "calibrate_cmd", "serve_cmd", "keys_cmd", "studio_cmd",
                    "mcp_cmd", "industry_cmd")


def _load_commands() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. Usage errors are click's (usage line + message, exit 2); our errors print one clear line."""
    from ..core.errors import StatesetError

    _load_commands()
    try:
        app(args=argv, prog_name="stateset-agents", standalone_mode=True)
    except StatesetError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except OSError as exc:
        if exc.filename is None and exc.errno not in _DISK_ERRORS:
            raise  # not a file's failure: a bug, whose trace is wanted
        err_console.print(f"[bold red]error:[/] {_os_error(exc)}", highlight=False, soft_wrap=True)
        return 1
    return 0


def _disk_errors() -> frozenset[int]:
    import errno

    return frozenset(getattr(errno, name) for name in ("ENOSPC", "EFBIG", "EDQUOT", "EROFS") if hasattr(errno, name))


_DISK_ERRORS = _disk_errors()


def _os_error(exc: OSError) -> str:
    """One line for a file the command could not write or read: which file, and the system's reason."""
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return f"{reason} (the file was not named)"
    if exc.errno in _DISK_ERRORS:  # a copy names its source first and the file it was writing second
        return f"cannot write {exc.filename2 or exc.filename}: {reason}"
    return f"cannot use {exc.filename}: {reason}"


if __name__ == "__main__":
    sys.exit(main())
