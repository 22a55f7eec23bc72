"""The engine versions each adapter was conformance-tested against, where each engine's own venv lives, and the
fail-closed version check. Light: stdlib only (imported by `plugins list`).

An engine never runs in the project's venv (its pins fight ours: verl wants transformers<5.11, OpenRLHF pins
transformers==5.15.0, deepspeed and flash-attn). `scripts/engine-venvs` builds one venv per engine from cached
wheels; the adapter runs the engine's Python from there and refuses any other version than the tested one.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from stateset_agents.core.errors import StatesetError

VENVS_ENV = "STATESET_AGENTS_ENGINE_VENVS"
CONFORMANCE_CMD = "scripts/engine-venvs {engine} && python -m stateset_plugins.engines.conformance {engine}"


@dataclass(frozen=True)
class Engine:
    name: str
    package: str          # the distribution whose version is pinned
    version: str          # the version the adapter was conformance-tested against
    requirements: tuple[str, ...]  # installed into its venv with dependencies (torch first, CPU build)
    no_deps: tuple[str, ...] = ()  # installed without dependencies (their pins are GPU-only builds)
    installable: bool = True
    notes: dict[str, str] = field(default_factory=dict)


TORCH = f"torch=={os.environ.get('TORCH_VERSION', '2.13.0')}"

ENGINES = {
    # verl asks for an unpinned torch: the CPU build goes in first, so its resolution never pulls a CUDA build
    "verl": Engine("verl", "verl", "0.9.1", (TORCH, "verl==0.9.1")),
    # OpenRLHF pins deepspeed==0.19.6 and flash-attn==2.8.3 (GPU builds): its wheel goes in without dependencies,
    # beside what its remote-reward client (openrlhf.utils.agent) and prompt dataset (openrlhf.datasets) import
    "openrlhf": Engine("openrlhf", "openrlhf", "0.11.2",
                       (TORCH, "transformers==5.15.0", "datasets", "aiohttp", "sympy", "pylatexenc"),
                       ("openrlhf==0.11.2",)),
    # NeMo RL is not installable from the package registry: render-only, nothing validated
    "nemo_rl": Engine("nemo_rl", "nemo-rl", "0.4.0", (), installable=False),
}


def venv_dir(engine: str) -> Path:
    spec = ENGINES[engine]
    root = os.environ.get(VENVS_ENV) or str(Path.home() / ".cache" / "stateset-agents" / "engines")
    return Path(root) / f"{engine}-{spec.version}"


def venv_python(engine: str) -> Path:
    return venv_dir(engine) / "bin" / "python"


def installed_version(python: Path, package: str) -> str | None:
    """The version of `package` in the venv of `python`, or None when it is not installed there."""
    code = ("import importlib.metadata as m, sys\ntry: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: print('')")
    proc = subprocess.run([str(python), "-c", code, package], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise StatesetError(f"{python} cannot run ({(proc.stderr or '').strip()[-300:]})")
    return proc.stdout.strip() or None


def require_engine(engine: str, python: str | os.PathLike | None = None) -> Path:
    """The engine venv's Python, once the installed engine is exactly the tested version; otherwise a refusal
    naming the installed and tested versions and how to run the conformance check."""
    spec = ENGINES[engine]
    py = Path(python) if python else venv_python(engine)
    how = CONFORMANCE_CMD.format(engine=engine)
    if not py.exists():
        raise StatesetError(f"{engine}: no engine venv at {py.parent.parent} (tested version {spec.package}=="
                            f"{spec.version}); build it and run the conformance check: {how}")
    found = installed_version(py, spec.package)
    if found != spec.version:
        raise StatesetError(f"{engine}: installed {spec.package} {found or 'not installed'} in {py.parent.parent}, "
                            f"but this adapter was conformance-tested against {spec.package}=={spec.version} only; "
                            f"install that version and run the conformance check: {how}")
    return py


def main(argv: list[str] | None = None) -> int:
    """`python -m stateset_plugins.engines.pins ENGINE`: print the engine's requirement lines (for the scripts)."""
    args = argv if argv is not None else sys.argv[1:]
    spec = ENGINES[args[0]]
    print(" ".join(spec.requirements) + "\t" + " ".join(spec.no_deps) + "\t" + str(venv_dir(spec.name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
