"""Load a script of benchmarks/ as a module, by its file path, as `stateset-agents benchmark` does (cli/
benchmark_cmd.py): benchmarks/ is not a package and is never put on sys.path."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """A fresh module of benchmarks/NAME.py (each call executes the file again)."""
    path = BENCHMARKS / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no benchmark script {path}")
    spec = importlib.util.spec_from_file_location(f"stateset_benchmarks_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
