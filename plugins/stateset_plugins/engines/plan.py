"""The plan an engine adapter renders, its canonical experiment digest, and the checks on what comes back.

A plan holds every input that decides a run: the engine and its pinned version, the algorithm, the model and its
revision, the data snapshot's sha256, the seed, the reward component with its version and config, the trainer's
capabilities and the engine config. Its digest (sha256 of the sorted, normalised JSON) names the run: it is the
run id, the rendered files carry it, and a result is accepted only from artifacts that name it.
"""
from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Mapping

from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import canonical_json, load_json, sha256_bytes, sha256_file, write_json

PLAN_SCHEMA = 1
MANIFEST = "engine_manifest.json"


def normalise(value: Any, where: str = "plan") -> Any:
    """JSON with one spelling per value: NFC strings, integral floats as integers (1.0 and 1 are one input),
    tuples as lists; NaN, infinities and non-JSON types are refused, naming the field."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(f"{where}: keys must be strings, got {key!r}", field=where)
            out[unicodedata.normalize("NFC", key)] = normalise(item, f"{where}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [normalise(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where} is {value}: a plan holds finite numbers only", field=where)
        return int(value) if value.is_integer() and abs(value) < 2 ** 53 else value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    raise InputError(f"{where}: {type(value).__name__} is not JSON", field=where)


def experiment_digest(plan: Mapping[str, Any]) -> str:
    return sha256_bytes(canonical_json(normalise(plan)))


def build_plan(engine, request: Mapping[str, Any], *, algorithms: Iterable[str], capabilities: Iterable[str],
               reward_version: str | None, dataset_sha256: str, rows: int) -> dict[str, Any]:
    """The plan of a `train` request for `engine` (a `pins.Engine`); refuses what is missing or unknown."""
    config = dict(request.get("config") or {})
    algorithm = config.get("engine_algorithm") or "grpo"
    if algorithm not in algorithms:
        raise InputError(f"{engine.name} runs {', '.join(sorted(algorithms))}, not {algorithm!r}",
                         field="engine_algorithm")
    model = request.get("base_model")
    if not model:
        raise InputError(f"{engine.name} needs the model it trains (--base-model: a hub id or a path)",
                         field="base_model")
    seed = request.get("seed", config.get("seed", 0))
    engine_config = config.get("engine_config") or {}
    if not isinstance(engine_config, Mapping):
        raise InputError("engine_config must be an object of the engine's own settings", field="engine_config")
    return normalise({
        "schema": PLAN_SCHEMA, "engine": {"name": engine.name, "package": engine.package, "version": engine.version},
        "algorithm": algorithm,
        "model": {"id": str(model), "revision": config.get("model_revision")},
        "data": {"sha256": dataset_sha256, "rows": rows},
        "seed": 0 if seed is None else seed,
        "steps": request.get("steps") or config.get("steps") or 50,
        "save_every": request.get("save_every") or config.get("save_every") or 10,
        "reward": {"component": request["reward"], "version": reward_version,
                   "config": dict(request.get("reward_config") or {})},
        "capabilities": sorted(capabilities),
        "engine_config": dict(engine_config),
    })


def write_manifest(out: Path, plan: Mapping[str, Any], digest: str, files: Iterable[str], **extra: Any) -> dict:
    """`engine_manifest.json`: the plan, its digest and each rendered file's sha256 (paths relative to `out`)."""
    record = {"schema": PLAN_SCHEMA, "experiment_digest": digest, "plan": dict(plan),
              "files": {name: sha256_file(out / name) for name in sorted(files)}, **extra}
    write_json(out / MANIFEST, record)
    return record


def verify_manifest(out: Path) -> dict:
    """The manifest, once its digest matches its plan and every file its sha256; refused otherwise."""
    path = out / MANIFEST
    if not path.is_file():
        raise StatesetError(f"{path}: no engine manifest; the rendered run is incomplete")
    record = load_json(path)
    if experiment_digest(record.get("plan") or {}) != record.get("experiment_digest"):
        raise StatesetError(f"{path}: the experiment digest does not match the plan it names")
    for name, sha in (record.get("files") or {}).items():
        if not (out / name).is_file() or sha256_file(out / name) != sha:
            raise StatesetError(f"{out / name}: missing or changed since it was rendered (experiment "
                                f"{record['experiment_digest'][:12]})")
    return record


def finite_metrics(rows: Iterable[Mapping[str, Any]], where: str, *, null_is_nonfinite: bool = False) -> list[dict]:
    """Metric rows whose every number is finite; refuses none at all, or any NaN/inf (or null, where the writer
    spells those so), naming the row."""
    kept = []
    for i, row in enumerate(rows, 1):
        for key, value in row.items():
            if (isinstance(value, float) and not math.isfinite(value)) or (null_is_nonfinite and value is None):
                raise StatesetError(f"{where}: row {i} has {key}={value}; results with non-finite metrics are "
                                    "refused")
        kept.append(dict(row))
    if not kept:
        raise StatesetError(f"{where}: no metrics; a run without metrics is refused")
    return kept
