"""Build each external engine's own venv (never the project's): `python -m stateset_plugins.engines.venvs
[ENGINE ...]`, what `scripts/engine-venvs` runs.

Wheels are cached in $STATESET_AGENTS_WHEEL_CACHE (default ~/.cache/stateset-agents/wheels, shared with `images
build`): the first build collects every wheel there (`pip wheel`, so an sdist-only dependency such as antlr4 is
built once), and every install is offline from that cache. A venv already holding the pinned engine is kept.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .pins import ENGINES, installed_version, venv_dir

CACHE_ENV = "STATESET_AGENTS_WHEEL_CACHE"


def wheel_cache() -> Path:
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "stateset-agents" / "wheels")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pip(python: Path, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", "-q", *args], capture_output=True, text=True)


def _install(python: Path, cache: Path, requirements, no_deps) -> subprocess.CompletedProcess:
    # --no-compile: byte-compiling torch, ray and transformers at install is most of the install's CPU time; the
    # modules a run imports are compiled on first import instead
    offline = ["install", "--no-compile", "--no-index", "--find-links", str(cache)]
    proc = _pip(python, [*offline, *requirements])
    if proc.returncode == 0 and no_deps:
        proc = _pip(python, [*offline, "--no-deps", *no_deps])
    return proc


def build(engine: str, log=print) -> float:
    """Make `engine`'s venv hold its pinned version; returns the seconds it took."""
    spec = ENGINES[engine]
    start = time.monotonic()
    venv = venv_dir(engine)
    python = venv / "bin" / "python"
    marker = venv / "stateset-requirements.txt"
    wanted = "\n".join([*spec.requirements, "--no-deps", *spec.no_deps]) + "\n"
    if python.exists() and installed_version(python, spec.package) == spec.version and (
            marker.is_file() and marker.read_text() == wanted):
        log(f"engine-venvs: {engine} {spec.version} already in {venv}")
        return time.monotonic() - start
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    cache = wheel_cache()
    proc = _install(python, cache, spec.requirements, spec.no_deps)
    if proc.returncode != 0:  # a wheel is missing from the cache: collect them (online), then install offline
        log(f"engine-venvs: collecting {engine}'s wheels into {cache}")
        links = ["--find-links", str(cache), "-w", str(cache)]
        for args in ([*spec.requirements], ["--no-deps", *spec.no_deps] if spec.no_deps else None):
            if args is None:
                continue
            got = _pip(python, ["wheel", *links, *args])
            if got.returncode != 0:
                raise SystemExit(f"engine-venvs: collecting wheels for {engine} failed:\n{got.stderr[-2000:]}")
        proc = _install(python, cache, spec.requirements, spec.no_deps)
    if proc.returncode != 0:
        raise SystemExit(f"engine-venvs: installing {engine} failed:\n{proc.stderr[-2000:]}")
    found = installed_version(python, spec.package)
    if found != spec.version:
        raise SystemExit(f"engine-venvs: {venv} holds {spec.package} {found}, not {spec.version}")
    marker.write_text(wanted)  # what this venv was built from: another requirement set rebuilds it
    took = time.monotonic() - start
    log(f"engine-venvs: {engine} {spec.version} installed in {venv} ({took:.0f}s)")
    return took


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or [n for n, s in ENGINES.items() if s.installable]
    for name in names:
        if name not in ENGINES or not ENGINES[name].installable:
            raise SystemExit(f"engine-venvs: {name!r} is not an installable engine "
                             f"({', '.join(n for n, s in ENGINES.items() if s.installable)})")
        build(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
