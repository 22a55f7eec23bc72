"""Which C allocator a training process runs on: jemalloc when it is installed, else the C library's.

With glibc's malloc the resident size of a CPU training process follows the high-water mark of its heap, not its
live tensors: after the first large block is freed glibc raises its mmap threshold, keeps freed activations for
reuse, and a heap whose top block is live cannot shrink (`docs/training.md`, Memory). jemalloc keeps size classes
apart and hands dirty pages back on a timer, so the resident size follows the live tensors at about the same speed
(benchmarks/bench_memory.py). An allocator is chosen when a process starts (``LD_PRELOAD``), so this decides the
environment of a child process that trains: the subprocess runtime asks for it through the trainer components'
``child_env``. It never changes a result: the allocator decides where memory lies, not what is computed.

``STATESET_AGENTS_ALLOCATOR``: "auto" (default: jemalloc when found), "system" (never preload), or a path to the
library to preload. Linux only; elsewhere nothing is preloaded. This module imports nothing heavy.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping

ALLOCATOR_ENV = "STATESET_AGENTS_ALLOCATOR"
#: Where Debian's and most distributions' packages (libjemalloc2, jemalloc) put the library.
LIBRARY_NAMES = ("libjemalloc.so.2", "libjemalloc.so")
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                "/usr/local/lib")


def jemalloc_library(dirs=LIBRARY_DIRS) -> str | None:
    """The path of an installed jemalloc, or None."""
    for directory in dirs:
        for name in LIBRARY_NAMES:
            path = Path(directory) / name
            if path.is_file():
                return str(path)
    return None


def allocator_env(environ: Mapping[str, str] | None = None, *, dirs=LIBRARY_DIRS) -> dict[str, str]:
    """The variables to add to a training child's environment (empty: the C library's allocator)."""
    environ = os.environ if environ is None else environ
    if not sys.platform.startswith("linux"):
        return {}
    choice = environ.get(ALLOCATOR_ENV, "auto").strip() or "auto"
    if choice == "system":
        return {}
    if choice == "auto":
        library = jemalloc_library(dirs)
        if library is None:
            return {}
    else:
        library = choice
        if not Path(library).is_file():
            from stateset_agents.core.errors import InputError

            raise InputError(f"{ALLOCATOR_ENV}={library}: no such library (use auto, system or a library's path)",
                             field=ALLOCATOR_ENV)
    preload = environ.get("LD_PRELOAD", "")
    if library in preload.split(":") or any("jemalloc" in Path(p).name for p in preload.split(":") if p):
        return {}  # already preloaded (by the user or by this process's own start)
    return {"LD_PRELOAD": f"{library}:{preload}" if preload else library}


def active_allocator() -> str:
    """"jemalloc" when this process runs on it, else "system" (read from the process's own memory map)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return "jemalloc" if "jemalloc" in maps else "system"
