"""`python -m stateset_agents.core.runtimes.serve KIND:NAME`: what the subprocess launcher starts. The same server as
`stateset-agents plugin serve KIND:NAME` with its defaults, without the CLI: its imports (typer, click, rich) were
half of a plugin's ~0.3 s to its handshake, a start every `--runtime subprocess` run waits for."""
from __future__ import annotations

import sys

from ..errors import StatesetError
from ..registry import get_registry
from .server import launched_by_kernel, serve


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m stateset_agents.core.runtimes.serve KIND:NAME", file=sys.stderr)
        return 2
    if not launched_by_kernel():
        return 2
    try:
        return serve(get_registry().resolve(argv[0]))
    except StatesetError as exc:  # one clear line, as the CLI prints it: the launcher shows stderr's tail
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
