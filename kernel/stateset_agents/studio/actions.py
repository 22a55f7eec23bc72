"""What the studio's screens do, each a call of the code the CLI runs (no Textual here).

* data: `pipeline.improve.read_summary` (the folder `improve run` wrote) and `plugin_api.datasets.load_dataset`
  (the loader the trainers use, so a file that is not a curated dataset is refused with its line and field);
* configure: `remote.config.validation_errors` (the messages of `finetune validate`) and the objective's own
  config class (`Config.from_dict`, found through the registry: the trainer's `python_api`);
* review: `remote.session.prepare` (what `finetune prepare` writes), quoted and capped by `remote.cap`;
* launch, follow, stop, resume: `remote.session.launch` / `attach` and `stateset_agents.runs`.

The studio keeps its form in WORKSPACE/studio/config.json: a `finetune` config (`finetune validate --config` and
`finetune prepare --config` read it as it is), its plans in WORKSPACE/studio/plans/RUN_ID and the runs' artifacts in
WORKSPACE/studio/runs/RUN_ID.
"""
from __future__ import annotations

import dataclasses
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import InputError, StatesetError

STUDIO_DIR = "studio"
CONFIG_FILE = "config.json"
#: The form's objective fields (config key -> label), shown when the chosen objective's config has the field.
FORM_FIELDS = {"seed": "seed", "num_generations": "generations", "beta": "KL coefficient", "lora_r": "LoRA r",
               "lora_alpha": "LoRA alpha", "lora_dropout": "LoRA dropout", "learning_rate": "learning rate",
               "steps": "update budget", "save_every": "save interval"}
#: The field that holds an objective's KL coefficient (the shared engine's name for it).
KL_FIELD = "beta"


def studio_dir(workspace: Path) -> Path:
    return Path(workspace) / STUDIO_DIR


def rel(path: str | Path | None, workspace: Path) -> str:
    """A path as the screens show it: relative to the workspace when inside it."""
    if not path:
        return "-"
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path(workspace).resolve()))
    except ValueError:
        return str(p)


# ------------------------------------------------------------------------------------------------------------ data

def find_datasets(workspace: Path, depth: int = 3) -> list[Path]:
    """Folders under the workspace that `improve run` wrote (they hold improve_summary.json), sorted."""
    from ..pipeline.improve import SUMMARY

    found, frontier = [], [Path(workspace)]
    for _ in range(depth + 1):
        nxt = []
        for folder in frontier:
            if (folder / SUMMARY).is_file():
                found.append(folder)
            try:
                nxt.extend(p for p in sorted(folder.iterdir()) if p.is_dir() and not p.name.startswith(".")
                           and p.name != STUDIO_DIR)
            except OSError:
                continue
        frontier = nxt
    return sorted(found)


def data_summary(choice: str | Path, workspace: Path, *, sample_rows: int = 3) -> dict[str, Any]:
    """The chosen dataset: an improve folder or its curated.jsonl. Raises InputError for anything else."""
    from ..pipeline.improve import CURATED, SUMMARY, read_summary
    from ..plugin_api.datasets import load_dataset
    from ..plugin_api.splits import refuse_evaluation_file

    path = Path(choice).expanduser()
    if not path.is_absolute():
        path = Path(workspace) / path
    if path.is_dir():
        folder, dataset = path, path / CURATED
        summary = read_summary(folder)  # says how to make one when it is missing
        dataset = folder / (((summary.get("splits") or {}).get("train") or {}).get("file") or CURATED)
    elif path.is_file():  # a curated.jsonl: the training set of the improve folder it sits in
        folder, dataset = path.parent, path
        if not (folder / SUMMARY).is_file():
            raise InputError(f"not a curated dataset: no {SUMMARY} beside it (the studio trains on what `improve "
                             f"run` wrote: `stateset-agents improve run --output DIR`, then pick DIR)",
                             path=str(path))
        summary = read_summary(folder)
        train = ((summary.get("splits") or {}).get("train") or {}).get("file") or CURATED
        if path.name != train:
            raise InputError(f"not a curated dataset: {folder / SUMMARY} names {train} as the training set",
                             path=str(path))
    else:
        raise InputError("no such file or folder", path=str(path))
    changed = (summary.get("outputs") or {}).get(dataset.name, {}).get("state")
    if changed not in (None, "ok"):
        raise InputError(f"{dataset.name} is {changed} since `improve run` wrote it (its size differs from "
                         f"{SUMMARY}'s); run `improve run` again", path=str(dataset))
    refuse_evaluation_file(dataset)  # a validation or test file is never a training set
    rows = load_dataset(dataset).rows  # the trainers' own loader: names the line and field of a bad row
    splits = (summary or {}).get("splits") or {}
    files = {role: folder / info["file"] for role, info in splits.items()
             if role != "train" and info.get("file") and (folder / info["file"]).is_file()}
    return {"folder": folder, "dataset": dataset, "summary": summary, "rows": len(rows),
            "sample": [_row_preview(r) for r in rows[:sample_rows]], "validation": files.get("validation"),
            "test": files.get("test"), "reward": ((summary or {}).get("reward") or {}).get("name")}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def _row_preview(row: Mapping[str, Any]) -> dict[str, Any]:
    users = [m for m in row.get("prompt") or [] if m.get("role") == "user"]
    completion = row.get("completion") or {}
    return {"prompt": _text(users[-1].get("content")) if users else "", "score": row.get("score"),
            "completion": _text(completion.get("content")) or
            ", ".join(c.get("function", {}).get("name", "?") for c in completion.get("tool_calls") or [])}


# ------------------------------------------------------------------------------------------------------- configure

def providers() -> list[str]:
    from ..core.registry import get_registry

    return get_registry().names("provider")


def default_provider() -> str | None:
    """The provider `train-remote` takes when none is named (the one that declares "default")."""
    from ..core.registry import get_registry

    return get_registry().default("provider", face="train-remote")


def algorithms() -> list[str]:
    """The trainers that declare "local-studio" and that a plan can run ("remote": every run, the local
    provider's too, is a plan), `train`'s default first."""
    from ..core.registry import get_registry

    registry = get_registry()
    planned = set(registry.names("trainer", "remote"))
    studio = [name for name in registry.names("trainer", "local-studio") if name in planned]
    first = registry.default("trainer", "local", face="train")
    return sorted(studio, key=lambda name: (name != first, name))


def rewards() -> list[str]:
    from ..core.registry import get_registry

    return get_registry().names("reward")


@functools.lru_cache(maxsize=None)
def objective_config(algorithm: str):
    """The objective's config class (what `train` and the worker build with `from_dict`), from the trainer's
    Python API as the registry loads it; None for a trainer that has none. Imports the trainer (and torch)."""
    from ..core.registry import get_registry

    api = get_registry().resolve(algorithm, "trainer").load_class().python_api()
    found = [v for k, v in api.items() if k.endswith("Config") and hasattr(v, "from_dict")]
    return found[0] if found else None


def objective_defaults(algorithm: str) -> dict[str, Any]:
    """The form's fields the objective has, with its defaults."""
    config = objective_config(algorithm)
    if config is None or not dataclasses.is_dataclass(config):
        return {}
    values = {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
    return {k: values[k] for k in FORM_FIELDS if k in values}


def load_config(workspace: Path) -> dict[str, Any]:
    path = studio_dir(workspace) / CONFIG_FILE
    if not path.is_file():
        return {}
    from ..remote import config as cfg

    return cfg.load(path)


def save_config(workspace: Path, config: Mapping[str, Any]) -> Path:
    from ..core.jsonio import write_json

    folder = studio_dir(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / CONFIG_FILE, {k: v for k, v in config.items() if v is not None})
    return folder / CONFIG_FILE


def validate(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every problem as (field path, message): `finetune validate`'s, then the objective's own checks of its
    fields, then the studio's one rule: an RL objective (one with a KL coefficient) needs it positive."""
    from ..remote import config as cfg

    errors = cfg.validation_errors(dict(config))
    algorithm = config.get("algorithm")
    if errors or not algorithm:
        return errors
    objective = objective_config(algorithm)
    training = dict(config.get("training") or {})
    if objective is not None:
        try:
            built = objective.from_dict(training)
        except InputError as exc:
            return [(f"training.{exc.field}" if exc.field else "training", exc.detail)]
        except (TypeError, ValueError) as exc:
            return [("training", str(exc))]
        kl = getattr(built, KL_FIELD, None)
        if kl is not None and not float(kl) > 0:
            errors.append((f"training.{KL_FIELD}", f"the KL coefficient must be positive for {algorithm} (an RL "
                                                   f"objective keeps the policy near its reference), got {kl!r}"))
    return errors


# ---------------------------------------------------------------------------------------------------------- review

def quote(config: Mapping[str, Any]) -> dict[str, Any]:
    """The provider's quote, the worst case and the cap, as `finetune prepare` shows them; `refusal` is the
    message the cap check raises (nothing is written then)."""
    from ..remote import config as cfg
    from ..remote import session
    from ..remote.cap import CapExceeded, check_cap_value, describe_quote, enforce_cap, worst_case

    full = cfg.validated(config)
    if "max_cost_usd" not in full:
        raise InputError("a cap is required: max_cost_usd", field="max_cost_usd")
    cap = check_cap_value(full["max_cost_usd"])
    with session.open_provider(full["provider"], full.get("provider_config")) as provider:
        answer = provider.quote(session.quote_request(full))
    out: dict[str, Any] = {"quote": answer, "cap": cap, "worst_case": None, "describe": None, "refusal": None}
    try:
        out["worst_case"] = worst_case(answer, full["gpus"], full["max_hours"])
        out["describe"] = describe_quote(answer, full["gpus"], full["max_hours"], out["worst_case"])
        enforce_cap(answer, full["gpus"], full["max_hours"], cap)
    except CapExceeded as exc:
        out["refusal"] = str(exc)
    return out


def _recorded_image(algorithm: str) -> str | None:
    """The pinned image `images pin` recorded for the trainer, as `train-remote` takes it."""
    from ..core.registry import get_registry
    from ..core.runtimes.container import image_for

    found = image_for(get_registry().resolve(algorithm, "trainer"))
    return (found[1].get("pinned") or None) if found else None


def prepare(config: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """The plan for `config` in WORKSPACE/studio/plans/RUN_ID (`session.prepare`, as `finetune prepare`). A plan
    already there for the same run id is that plan (verified), so reviewing the same inputs again never makes a
    second run. Returns the plan with "_workspace"."""
    from ..remote import config as cfg
    from ..remote import session, state
    from ..remote.plan import load_verified

    full = cfg.validated(config)
    root = state.private_dir(studio_dir(workspace) / "plans")
    with session.open_provider(full["provider"], full.get("provider_config")) as provider:
        answer = provider.quote(session.quote_request(full))
        if (answer.get("image") or {}).get("problem") and not full.get("image"):
            pinned = _recorded_image(full["algorithm"])
            if not pinned:
                raise InputError(f"{full['provider']}: {answer['image']['problem']}", field="image")
            full["image"] = pinned
        tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=root))
        try:
            plan = session.prepare(full, tmp, provider)
            final = root / plan["run_id"]
            if final.exists():
                return {**load_verified(final), "_workspace": str(final), "_notice": plan.get("_notice")}
            tmp.rename(final)
            return {**plan, "_workspace": str(final)}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------- launch and run

def launch(plan_dir: Path, workspace: Path) -> dict[str, Any]:
    """`session.launch`: create the plan's job, or attach to the one it already created (same run id)."""
    from ..remote import session
    from ..remote.plan import load_verified

    plan = load_verified(plan_dir)
    output = studio_dir(workspace) / "runs" / plan["run_id"]
    with session.open_provider(plan["provider"], plan["config"].get("provider_config")) as provider:
        return session.launch(Path(plan_dir), provider, output=output)


def follow(run_id: str, poll_s: float = 1.0) -> dict[str, Any]:
    """Watch the job under its cap until it ends, then collect it (`session.attach`, as `train-remote --attach`)."""
    from ..remote import session

    return session.attach(run_id, poll_s=poll_s)


def stop(run_id: str, poll_s: float = 0.5) -> dict[str, Any]:
    """`runs.stop`, waiting for the checkpoint (as `finetune stop`)."""
    from .. import runs

    return runs.stop(run_id, wait=True, poll_s=poll_s)


def prepare_resume(run_id: str, step: int, workspace: Path) -> dict[str, Any]:
    """An exact continuation of a stopped run from checkpoint `step` (`runs.prepare_resume`)."""
    from .. import runs

    root = studio_dir(workspace) / "plans"
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"{run_id}-resume-{step}"
    if (target / "plan.json").is_file():
        from ..remote.plan import load_verified

        return {**load_verified(target), "_workspace": str(target)}
    plan = runs.prepare_resume(run_id, step, target, "exact")
    return {**plan, "_workspace": str(target)}


def run_for_dir(run_dir: Path) -> str | None:
    """The recorded run whose artifacts go to `run_dir` (a run started with `train-remote`/`finetune launch`)."""
    from .. import runs

    want = Path(run_dir).resolve()
    for row in runs.list():
        if row.get("output") and Path(row["output"]).resolve() == want:
            return row["run_id"]
    return None


def message(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, StatesetError) else f"{type(exc).__name__}: {exc}"


def load_plan_id(plan_dir: Path) -> str:
    from ..remote.plan import load_verified

    return load_verified(plan_dir)["run_id"]
