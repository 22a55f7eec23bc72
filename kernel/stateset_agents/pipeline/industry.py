"""Industry recipes: a domain's tools, policy, reward configs and a first dataset with explicit split roles.

A recipe is a plugin (`register_recipes`; core/hookspec.py documents the object it names). `prepare` writes a bundle:

    README.md           how to run the loop on it
    bundle.json         the recipe, seed and size, every file's sha256 and role, the overlap audit
    policy.yaml         the policy file (`--policy`), policy.md its prose, tools.json the tool schemas
    rewards/NAME.yaml   reward config files (`--reward-config`)
    train/conversations.jsonl                          conversations (the recipe's log format), every row
                                                       ``"split": "train"``
    validation/conversations.jsonl, validation/prompts.jsonl   the same for validation (rows say their role)
    test/conversations.jsonl, test/prompts.jsonl

The split is by customer (`metadata.customer_id`): each customer's conversations are all in one role. Rows record
their role as `improve run`'s split files do, so the training loader refuses the validation and test files
(`plugin_api.splits`). The audit (`audit_bundle`) fails on leakage: a customer or id in two roles, or a held-out
prompt or opening that equals (exactly, or after normalising: `plugin_api.overlap`) one of another role. The bundle
is written beside its destination and moved into place only once the audit passed.

Generated data is for starting and smoke-testing only, never for reward-validity or evidence figures.
"""
from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable

import orjson

from ..core.errors import InputError, StatesetError
from ..core.jsonio import dumps, sha256_file, write_json, write_text
from ..plugin_api.overlap import find_overlaps
from ..plugin_api.splits import TEST, TRAIN, VALIDATION
from .curated_rows import normalise_message

BUNDLE_SCHEMA = 1
BUNDLE_FILE = "bundle.json"
ROLES = (TRAIN, VALIDATION, TEST)
CONVERSATIONS, PROMPTS = "conversations.jsonl", "prompts.jsonl"
#: The share of customers for validation, and the same again for test.
HELD_OUT_SHARE = 0.15
DEFAULT_SIZE = 200
USE = ("generated: for starting and smoke-testing the loop only; never for reward-validity or evidence figures "
       "(those come from data nobody here wrote)")
_NEEDS = ("tools", "policy", "policy_text", "rewards", "log_format", "generate")


# ------------------------------------------------------------------------------------------------ recipes


def _registry():
    from ..core.registry import get_registry

    return get_registry()


def list_recipes() -> list[dict[str, Any]]:
    return [{"name": s.name, "version": s.version, "summary": s.summary, "plugin": s.plugin, "package": s.package}
            for s in sorted(_registry().recipes.values(), key=lambda s: s.name)]


def load_recipe(name: str) -> tuple[Any, Any]:
    """(its registration, the recipe object), the object checked for what `prepare` reads."""
    spec = _registry().recipe(name)
    recipe = spec.load()
    missing = [attr for attr in _NEEDS if not hasattr(recipe, attr)]
    if missing:
        raise StatesetError(f"recipe {name!r} ({spec.target}, plugin {spec.plugin}) lacks {', '.join(missing)}")
    rewards = recipe.rewards
    if not rewards or not all(isinstance(r, Mapping) and isinstance(r.get("reward"), str) for r in rewards):
        raise StatesetError(f"recipe {name!r}: rewards must be a non-empty list of {{'reward': NAME, 'config': {{}}}}")
    _registry().resolve(recipe.log_format, "ingestor")  # the loop starts by ingesting with it
    return spec, recipe


def describe(name: str) -> dict[str, Any]:
    """What `industry show` prints: the recipe, its tools, its policy's rules and its reward configs."""
    import yaml

    spec, recipe = load_recipe(name)
    policy = yaml.safe_load(recipe.policy) or {}
    tools = [t.get("function", t) for t in recipe.tools]
    return {"name": spec.name, "version": spec.version, "summary": spec.summary, "plugin": spec.plugin,
            "package": spec.package,
            "tools": [{"name": t.get("name"), "description": t.get("description", "")} for t in tools],
            "policy": {"name": policy.get("name"), "version": policy.get("version"),
                       "rules": [r.get("id") for r in policy.get("rules") or ()]},
            "rewards": [{"reward": r["reward"], "config": r.get("config") or {}, "policy": bool(r.get("policy"))}
                        for r in recipe.rewards],
            "policy_text": recipe.policy_text}


# ------------------------------------------------------------------------------------------------ prepare


def _checked(recipe_name: str, conversations: Iterable[Any], size: int) -> list[dict[str, Any]]:
    out, ids = [], set()
    for i, conv in enumerate(conversations):
        where = f"recipe {recipe_name!r}: conversation {i + 1}"
        if not isinstance(conv, Mapping) or not isinstance(conv.get("messages"), list) or not conv["messages"]:
            raise StatesetError(f"{where} is not a mapping with a non-empty list of messages")
        meta = conv.get("metadata")
        for key in ("customer_id", "label"):
            if not isinstance(meta, Mapping) or not isinstance(meta.get(key), str) or not meta[key]:
                raise StatesetError(f"{where} has no metadata.{key} (a non-empty string)")
        cid = conv.get("id")
        if not isinstance(cid, str) or not cid or cid in ids:
            raise StatesetError(f"{where} has a missing or repeated id {cid!r}")
        ids.add(cid)
        out.append(dict(conv))
    if len(out) != size:
        raise StatesetError(f"recipe {recipe_name!r} generated {len(out)} conversations; {size} were asked for")
    return out


def assign_roles(customers: list[str], seed: int) -> dict[str, str]:
    """Each customer's role: customers ranked by a seeded hash; the first share to validation, the next to test
    (at least one each), the rest to train."""
    import hashlib

    ranked = sorted(customers, key=lambda c: hashlib.sha256(f"{seed}:{c}".encode()).digest())
    n_held = max(1, round(HELD_OUT_SHARE * len(ranked)))
    return {c: VALIDATION if k < n_held else TEST if k < 2 * n_held else TRAIN for k, c in enumerate(ranked)}


def _decision_turn(conv: Mapping[str, Any]) -> int:
    """The assistant turn the held-out prompt asks for: the recipe's `metadata.decision_turn`, else the first."""
    msgs = conv["messages"]
    turn = conv["metadata"].get("decision_turn")
    if isinstance(turn, int) and not isinstance(turn, bool) and 0 < turn < len(msgs) \
            and msgs[turn].get("role") == "assistant":
        return turn
    return next((k for k, m in enumerate(msgs) if m.get("role") == "assistant"), len(msgs))


def _prompt_row(conv: Mapping[str, Any], role: str, line: int) -> dict[str, Any]:
    turn = _decision_turn(conv)
    return {"id": f"{conv['id']}#{turn}", "split": role, "group": f"customer_id={conv['metadata']['customer_id']}",
            "prompt": [normalise_message(m) for m in conv["messages"][:turn]], "tools": conv.get("tools") or [],
            "metadata": conv["metadata"],
            "lineage": {"conversation_id": conv["id"], "source_path": f"{role}/{CONVERSATIONS}", "line": line,
                        "turn_index": turn}}


def _write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for row in rows:
            f.write(dumps(row) + b"\n")


def prepare(name: str, output: str | Path, *, size: int = DEFAULT_SIZE, seed: int = 0,
            overwrite: bool = False) -> dict[str, Any]:
    """Write recipe `name`'s bundle to `output` and return bundle.json's record. Nothing is left at `output` unless
    the whole bundle was written and its audit passed."""
    import yaml

    if size < 10:
        raise InputError(f"--size {size} is too small: a bundle needs at least 10 conversations", field="size")
    output = Path(output)
    if output.exists() and not overwrite:
        raise InputError("already exists; pass --overwrite to replace it", path=str(output))
    spec, recipe = load_recipe(name)
    conversations = _checked(name, recipe.generate(size, seed), size)
    customers = list(dict.fromkeys(c["metadata"]["customer_id"] for c in conversations))
    if len(customers) < 3:
        raise StatesetError(f"recipe {name!r} generated {len(customers)} customer(s); three roles need three")
    role_of = assign_roles(customers, seed)

    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        by_role: dict[str, list[dict[str, Any]]] = {r: [] for r in ROLES}
        for conv in conversations:
            role = role_of[conv["metadata"]["customer_id"]]
            by_role[role].append({"id": conv["id"], "split": role, "messages": conv["messages"],
                                  "tools": conv.get("tools") or [], "metadata": conv["metadata"]})
        for role, rows in by_role.items():
            _write_jsonl(staging / role / CONVERSATIONS, rows)
            if role != TRAIN:
                _write_jsonl(staging / role / PROMPTS, (_prompt_row(c, role, k) for k, c in enumerate(rows, 1)))
        (staging / "policy.yaml").write_text(recipe.policy, encoding="utf-8")
        (staging / "policy.md").write_text(recipe.policy_text, encoding="utf-8")
        (staging / "tools.json").write_bytes(orjson.dumps(list(recipe.tools), option=orjson.OPT_INDENT_2) + b"\n")
        (staging / "rewards").mkdir()
        for entry in recipe.rewards:
            doc = {"schema_version": 1, "reward": entry["reward"], "config": dict(entry.get("config") or {})}
            (staging / "rewards" / f"{entry['reward']}.yaml").write_text(
                yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        audit = audit_bundle(staging, record=_record_roles(by_role))
        record = {"schema_version": BUNDLE_SCHEMA, "use": USE,
                  "recipe": {"name": spec.name, "version": spec.version, "plugin": spec.plugin,
                             "package": spec.package},
                  "seed": seed, "size": size, "split_by": "metadata.customer_id",
                  "held_out_share": HELD_OUT_SHARE, "splits": _splits(staging, by_role),
                  "labels": dict(sorted(Counter(c["metadata"]["label"] for c in conversations).items())),
                  "files": {p.relative_to(staging).as_posix(): sha256_file(p)
                            for p in sorted(staging.rglob("*")) if p.is_file()},
                  "audit": audit}
        write_text(staging / "README.md", render_readme(record, recipe))
        write_json(staging / BUNDLE_FILE, record)
        if output.exists():
            shutil.rmtree(output)
        staging.rename(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return record


def _record_roles(by_role: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, list[str]]:
    return {role: sorted({r["metadata"]["customer_id"] for r in rows}) for role, rows in by_role.items()}


def _splits(root: Path, by_role: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, Any]:
    out = {}
    for role, rows in by_role.items():
        files = {"conversations": f"{role}/{CONVERSATIONS}"} | ({"prompts": f"{role}/{PROMPTS}"} if role != TRAIN
                                                                else {})
        out[role] = {"role": role, "conversations": len(rows),
                     "customers": len({r["metadata"]["customer_id"] for r in rows}),
                     "files": {k: {"file": f, "sha256": sha256_file(root / f)} for k, f in files.items()}}
    return out


# ------------------------------------------------------------------------------------------------ the audit


def _read_rows(path: Path, role: str) -> list[dict[str, Any]]:
    rows = []
    if not path.is_file():
        raise InputError(f"the {role} split's file is missing", path=str(path))
    for line, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"not JSON: {exc}", path=str(path), line=line) from None
        if not isinstance(row, dict) or row.get("split") != role:
            raise InputError(f"a row of the {role} split must record its role (split: {role})", path=str(path),
                             line=line, field="split")
        rows.append({**row, "_line": line})
    return rows


def _prefixes(conversations: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every prompt a conversation can give a training row: the messages before each assistant turn."""
    rows = []
    for conv in conversations:
        msgs = conv.get("messages") or []
        for k, m in enumerate(msgs):
            if isinstance(m, Mapping) and m.get("role") == "assistant":
                rows.append({"id": f"{conv.get('id')}#{k}", "prompt": msgs[:k], "_line": conv["_line"]})
    return rows


def _openings(conversations: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for conv in conversations:
        msgs = conv.get("messages") or []
        first = next((k for k, m in enumerate(msgs) if isinstance(m, Mapping) and m.get("role") == "assistant"),
                     len(msgs))
        out.append({"id": str(conv.get("id")), "prompt": msgs[:first]})
    return out


def audit_bundle(directory: str | Path, *, record: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """Check a bundle's splits for leakage; return the report, or raise InputError naming every collision.

    Checked: each row records its file's role; no customer and no conversation id in two roles; no held-out prompt
    equal to a prompt of another role's conversations, and no conversation opening equal to one of another role,
    exactly or after normalising (case, punctuation, whitespace)."""
    root = Path(directory)
    conversations = {role: _read_rows(root / role / CONVERSATIONS, role) for role in ROLES}
    prompts = {role: _read_rows(root / role / PROMPTS, role) for role in ROLES if role != TRAIN}
    problems: list[str] = []
    for what, key in (("customer", lambda r: (r.get("metadata") or {}).get("customer_id")),
                      ("conversation id", lambda r: r.get("id"))):
        seen: dict[Any, str] = {}
        for role in ROLES:
            for row in conversations[role]:
                value = key(row)
                if value in seen and seen[value] != role:
                    problems.append(f"{what} {value!r} is in {seen[value]} and in {role} ({role}/{CONVERSATIONS} "
                                    f"line {row['_line']})")
                seen.setdefault(value, role)
    collisions: list[dict[str, Any]] = []
    for held in (VALIDATION, TEST):
        for other in ROLES:
            if other == held:
                continue
            found = [("prompt", o) for o in find_overlaps(_prefixes(conversations[other]), prompts[held])]
            found += [("opening", o) for o in find_overlaps(conversations[other], _openings(conversations[held]))]
            for kind, o in found:
                collisions.append({"kind": kind, "match": o.match, "held_out": held, "held_out_case": o.case_id,
                                   "other": other, "file": f"{other}/{CONVERSATIONS}", "line": o.dataset_line,
                                   "row_id": o.row_id})
    seen_pairs = set()
    for c in collisions:
        pair = (c["kind"], c["held_out_case"], c["row_id"].split("#")[0] if c["row_id"] else None)
        if pair not in seen_pairs:
            seen_pairs.add(pair)
            problems.append(f"{c['file']} line {c['line']} (row {c['row_id']!r}): its {c['kind']} matches "
                            f"{c['held_out']} case {c['held_out_case']!r} ({c['match']})")
    report = {"passed": not problems, "checks": ["roles recorded", "customers", "conversation ids",
                                                  "held-out prompts (exact, normalised)",
                                                  "openings (exact, normalised)"],
              "conversations": {r: len(rows) for r, rows in conversations.items()},
              "prompts": {r: len(rows) for r, rows in prompts.items()}, "collisions": collisions}
    if record is not None:
        report["customers"] = {role: len(cs) for role, cs in record.items()}
    if problems:
        shown = "; ".join(problems[:10]) + (f"; ... and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise InputError(f"the splits leak ({len(problems)} problem(s)): {shown}", path=str(root))
    return report


# ------------------------------------------------------------------------------------------------ the README


def loop_commands(record: Mapping[str, Any], recipe: Any, *, base_model: str | None = None, steps: int = 20
                  ) -> list[str]:
    """The loop on a bundle, run from inside it: ingest the train split, grade and curate it (no further split:
    the bundle's validation and test are the held-out roles), train with validation for checkpoint selection,
    nominate, one look at test."""
    first = recipe.rewards[0]
    reward = f"--reward-config rewards/{first['reward']}.yaml" + (" --policy policy.yaml" if first.get("policy")
                                                                   else "")
    model = f" --base-model {base_model}" if base_model else ""
    return [
        f"stateset-agents ingest --format {recipe.log_format} --input train/ --output work/ingest",
        f"stateset-agents improve run --transcripts work/ingest {reward} --held-out 0 --output work/improve",
        f"stateset-agents train --dataset work/improve/curated.jsonl {reward}{model} "
        f"--eval-prompts validation/prompts.jsonl --output work/run --steps {steps} --save-every 5",
        "stateset-agents nominate work/run --checkpoint STEP   # STEP: manifest.json selection.best_on_validation",
        f"stateset-agents evaluate --run work/run --split test --prompts test/prompts.jsonl {reward}",
    ]


def render_readme(record: Mapping[str, Any], recipe: Any) -> str:
    r, s = record["recipe"], record["splits"]
    rows = "\n".join(f"| `{role}/` | {role} | {s[role]['conversations']} | {s[role]['customers']} |" for role in ROLES)
    labels = ", ".join(f"{k} {v}" for k, v in record["labels"].items())
    rewards = "\n".join(f"- `rewards/{e['reward']}.yaml`" + (" (with `--policy policy.yaml`)" if e.get("policy")
                                                             else "") for e in recipe.rewards)
    commands = "\n".join(loop_commands(record, recipe))
    return f"""# Industry bundle: {r['name']} {r['version']}

Made by `stateset-agents industry prepare {r['name']} --size {record['size']} --seed {record['seed']}` (plugin
{r['plugin']}, package {r['package']}).

**The conversations are generated: for starting and smoke-testing the loop only.** Never use them for
reward-validity or evidence figures; those come from data nobody here wrote (your own logs, reviewed).

## What is here

| folder | role | conversations | customers |
| --- | --- | --- | --- |
{rows}

Split by customer (`metadata.customer_id`): a customer's conversations are all in one role. Every row records its
role (`"split": ...`), so `train` refuses the validation and test files; `validation/prompts.jsonl` selects
checkpoints, `test/prompts.jsonl` is looked at once, after `nominate`. The overlap audit (exact and normalised)
passed: `bundle.json` holds it, with every file's sha256; `stateset-agents industry audit .` runs it again.

Each conversation's `metadata.label` says what it shows ({labels}); `metadata.shows` says it in words and
`metadata.expected_tool_calls` holds the calls a correct agent makes.

- `policy.yaml`: the policy file (docs/policy-language.md); `policy.md`: the policy in prose.
- `tools.json`: the tool schemas the conversations declare.
{rewards}

## Run the loop (from this folder)

```bash
{commands}
```

Edit the policy, the tools and the reward configs to your domain, then replace the generated logs with your own.
"""
