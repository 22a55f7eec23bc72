"""The configuration `finetune` and `train-remote` share: its JSON schema, loading, and validation that reports
every error with its field path (not just the first)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..core.errors import InputError
from ..core.jsonio import load_mapping

#: The schema's fields; `schema()` adds what the registry knows: the providers, the trainers that run remotely
#: (capability "remote"), the defaults they declare, and the objective fields plugins register for the command.
_PROPERTIES: dict[str, Any] = {
    "provider": {"description": "Where the job runs."},
    "provider_config": {"type": "object", "description": "Provider-specific options (cloud_type, region...)."},
    "dataset": {"type": "string", "minLength": 1, "description": "curated.jsonl from `improve run`."},
    "eval_prompts": {"type": ["string", "null"],
                     "description": "Validation prompts (validation.jsonl, or .txt/.jsonl): every checkpoint is "
                                    "evaluated on them; a test file is refused."},
    "eval": {"type": "object", "description": "Evaluation protocol: samples, temperature, max_new_tokens, "
                                              "allow_truncation (default greedy, 256 tokens)."},
    "init_adapter": {"type": ["string", "null"],
                     "description": "A parent run's adapter directory (RUN/adapter) to start from."},
    "base_model": {"type": ["string", "null"], "description": "Hub id or path on the remote side."},
    "base_model_revision": {"type": ["string", "null"], "pattern": r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$",
                            "description": "The hub revision of base_model (a branch, a tag or a commit sha), "
                                           "loaded as from_pretrained(revision=...) and recorded in the plan and "
                                           "the run's manifest; only with a hub id."},
    "algorithm": {"description": "The trainer (a trainer component that declares \"remote\")."},
    "reward": {"type": ["string", "null"], "description": "Reward component (required by the trainer)."},
    "reward_config": {"type": "object"},
    "training": {"type": "object", "description": "Objective fields (steps, batch_size, seed, ...)."},
    "gpu": {"type": ["string", "null"], "description": "Provider GPU id or a short name (H100, A100-80GB)."},
    "gpus": {"type": "integer", "minimum": 1, "maximum": 8, "default": 1},
    "max_hours": {"type": "number", "exclusiveMinimum": 0, "maximum": 72, "default": 2},
    "max_cost_usd": {"type": "number", "exclusiveMinimum": 0,
                     "description": "Hard cap in USD; the job is refused or terminated before exceeding it."},
    "storage_gb": {"type": "number", "minimum": 0, "maximum": 2000, "default": 20},
    "image": {"type": ["string", "null"],
              "description": "Trainer image, pinned as NAME@sha256:DIGEST (remote providers)."},
    "salt": {"type": ["string", "null"], "description": "Set by --new-run: runs the same job again."},
}
#: The face whose defaults (`default:train-remote`) the config takes, and whose plugin options are objective fields.
FACE = "train-remote"


def schema(registry=None) -> dict[str, Any]:
    """The config's JSON schema, built from the registry now (installing a provider or trainer changes it)."""
    if registry is None:
        from ..core.registry import get_registry

        registry = get_registry()
    properties = {k: dict(v) for k, v in _PROPERTIES.items()}
    required = ["dataset"]
    for key, kind, capability in (("provider", "provider", None), ("algorithm", "trainer", "remote")):
        properties[key]["enum"] = registry.names(kind, capability)
        default = registry.default(kind, capability, face=FACE)
        if default is None:
            required.append(key)  # no single choice: the config must name one
        else:
            properties[key]["default"] = default
    fields = {o.field: o.schema for o in registry.options_for(FACE)}
    if fields:
        properties["training"]["properties"] = fields
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "stateset-agents remote training config", "type": "object", "additionalProperties": False,
            "required": required, "properties": properties}


def defaults(full_schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v["default"] for k, v in full_schema["properties"].items() if "default" in v}


def validation_errors(config: Any, *, base: Path | None = None) -> list[tuple[str, str]]:
    """Every problem as (field path, message); files are checked for existence relative to `base`."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = [(".".join(str(p) for p in e.absolute_path) or "(root)", e.message)
              for e in sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.absolute_path])]
    if isinstance(config, Mapping):
        for key in ("dataset", "eval_prompts"):
            value = config.get(key)
            if isinstance(value, str) and value and not resolve_path(value, base).is_file():
                errors.append((key, f"file not found: {value}"))
        errors += _revision_errors(config.get("base_model"), config.get("base_model_revision"), base)
        parent = config.get("init_adapter")
        if isinstance(parent, str) and parent and not (resolve_path(parent, base) / "adapter_model.safetensors").is_file():
            errors.append(("init_adapter", f"not an adapter directory (no adapter_model.safetensors): {parent}"))
        prompts = config.get("eval_prompts")
        if isinstance(prompts, str) and prompts and resolve_path(prompts, base).is_file():
            from ..plugin_api.splits import TEST, file_role

            try:
                if file_role(resolve_path(prompts, base)) == TEST:
                    errors.append(("eval_prompts", "this is a test file (its rows say split: test): training "
                                                   "evaluates checkpoints on the validation file only"))
            except InputError as exc:
                errors.append(("eval_prompts", str(exc)))
        dataset = config.get("dataset")
        if isinstance(dataset, str) and dataset and resolve_path(dataset, base).is_file():
            from ..plugin_api.splits import refuse_evaluation_file

            try:  # the same refusal as the local loader's, before anything is rented
                refuse_evaluation_file(resolve_path(dataset, base))
            except InputError as exc:
                errors.append(("dataset", str(exc)))
    return errors


def _revision_errors(model: Any, revision: Any, base: Path | None) -> list[tuple[str, str]]:
    """A revision is a git ref or sha of a hub repo: no `..`, `//` or `@{`, no trailing `/`, `.` or `.lock`
    (git's own rules), and only beside a hub id (a local path or file has no revisions)."""
    if not isinstance(revision, str) or not revision:
        return []
    if any(bad in revision for bad in ("..", "//", "@{")) or revision.endswith(("/", ".", ".lock")):
        return [("base_model_revision", f"{revision!r} is not a git ref or commit sha")]
    if not isinstance(model, str) or not model:
        return [("base_model_revision", "a revision needs base_model, a hub id (the default model is a local "
                                        "file, which has no revisions)")]
    local = Path(model).expanduser()
    if local.is_absolute() or model.startswith((".", "~")) or model.endswith(".gguf") or \
            resolve_path(model, base).exists():
        return [("base_model_revision", f"a revision applies to a hub id; base_model {model} is a local path")]
    return []


def resolve_path(value: str, base: Path | None) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() or base is None else base / path


def load(path: str | Path) -> dict[str, Any]:
    """Read a YAML/JSON config file (not yet validated)."""
    path = Path(path)
    data = load_mapping(path)
    # relative file paths in a config file are relative to that file
    for key in ("dataset", "eval_prompts", "init_adapter"):
        if isinstance(data.get(key), str):
            data[key] = str(resolve_path(data[key], path.parent))
    return data


#: A provider whose worker runs the trainer on every GPU it rents (the N-process engine under torchrun) declares
#: this; --gpus N > 1 anywhere else would bill N GPUs for a run that trains on one.
MULTI_GPU = "multi_gpu"


def refuse_unused_gpus(full: Mapping[str, Any], source: str | None = None) -> None:
    """--gpus N > 1 is refused, before any quote, for a provider that would not train on all N."""
    gpus, provider = int(full.get("gpus") or 1), full.get("provider")
    if gpus <= 1:
        return
    from ..core.registry import get_registry

    if provider not in get_registry().names("provider", MULTI_GPU):
        raise InputError(f"--gpus {gpus}: provider {provider} runs the trainer as one process on one GPU (its worker "
                         f"does not launch the N-process engine yet), so {gpus} GPUs would be billed for a run that "
                         "trains on 1; nothing was quoted or rented. Use --gpus 1, or `train --nproc N` on a "
                         "machine with N GPUs (docs/scale.md)", path=source, field="gpus")


def validated(config: Mapping[str, Any], *, source: str | None = None) -> dict[str, Any]:
    """Defaults filled in; raises one InputError listing every problem."""
    errors = validation_errors(dict(config))
    if errors:
        listing = "; ".join(f"{where}: {message}" for where, message in errors)
        raise InputError(f"{len(errors)} problem(s) in the config: {listing}", path=source,
                         field=errors[0][0] if len(errors) == 1 else None)
    full = {**defaults(schema()), **{k: v for k, v in config.items() if v is not None}}
    refuse_unused_gpus(full, source)
    full.setdefault("training", {})
    full.setdefault("reward_config", {})
    full.setdefault("eval", {})
    full.setdefault("provider_config", {})
    return full
