"""`evaluator:paired`: the base model and an adapter answer the same held-out cases with the same decoding settings
and seed; one reward grades both, case by case; the result is eval_results.json with the paired statistics.

Request fields:

* ``prompts`` (path, .txt or .jsonl), ``adapter`` (directory), ``reward`` (name), ``reward_config``,
  ``reward_runtime`` ("inprocess");
* ``base_model``: path, .gguf, hub id; default: the base model in the adapter's run manifest, else the offline
  default;
* ``protocol``: ``samples`` (1), ``temperature`` (0: greedy), ``max_new_tokens`` (256), ``seed`` (0),
  ``allow_truncation`` (False: a cut answer scores 0, ungraded); the evaluation's own, never the run's training
  sampling (`models.evaluation.EvalProtocol`). ``max_prompt_tokens``: the run's training config, else 512.
  (A request's older ``decoding`` block is read as the protocol's temperature, max_new_tokens and seed.)
* ``dataset`` (the training rows to check for overlap; default: the run manifest's dataset, when it is on disk),
  ``drop_overlap`` (drop colliding cases instead of refusing);
* ``output``: directory for eval_results.json (optional: the completed event carries the results either way);
* ``reuse``: an existing eval_results.json to reuse instead of generating, when its cases, reward identity and
  protocol are those of this request (results of another protocol, or of none recorded, are never reused) (the gate uses this for runs already evaluated on the same prompts);
* ``batch_size`` (16): cases generated at once; each batch is seeded alike for both sides, so pairs stay paired.
* ``split``: the role the caller evaluates (`validation`, `test`); a file whose rows record another role is refused.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

from stateset_agents import Evaluator
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import load_json, sha256_file, write_json
from stateset_agents.plugin_api.datasets import load_dataset, load_eval_prompts
from stateset_agents.plugin_api.evidence import add_statistics
from stateset_agents.plugin_api.overlap import isolate_cases
from stateset_agents.plugin_api.stats import paired_totals

from . import VERSION
from .model_session import (load_session, manifest_path_of, resolve_base_model, resolve_protocol, reward_component, run_manifest_of,
                            verify_adapter)

REQUIRED = ("prompts", "adapter", "reward")
RESULTS_FILE = "eval_results.json"


def _case_key(case: Mapping[str, Any]) -> tuple[str, Any]:
    return str(case.get("id")), case.get("prompt")


def reusable(existing: Mapping[str, Any], cases, identity: Mapping[str, Any], protocol: Mapping[str, Any]) -> bool:
    """Whether earlier results answer exactly this request: same cases (id and prompt, in order), same reward
    identity, same protocol (greedy or K samples at T, max_new_tokens, truncation rule). Results that record no
    protocol came from an older release, whose answers were sampled at the training temperature: never reused."""
    if (existing.get("reward") or {}) != dict(identity):
        return False
    if (existing.get("protocol") or None) != dict(protocol):
        return False
    return [_case_key(c) for c in existing.get("cases") or []] == [_case_key(c) for c in cases]


class PairedEvaluator(Evaluator):
    name = "paired"
    version = VERSION
    capabilities = ("paired", "eval_results", "statistics")

    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            yield from self._run({**self.config, **dict(request)})
        except StatesetError as exc:
            yield {"type": "failed", "reason": "error", "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a stream must end with completed or failed
            yield {"type": "failed", "reason": type(exc).__name__, "message": str(exc)}

    def _run(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        from stateset_plugins.models.evaluation import evaluate

        missing = [k for k in REQUIRED if not request.get(k)]
        if missing:
            raise InputError(f"the request lacks {', '.join(missing)}", field=missing[0])
        adapter = str(request["adapter"])
        manifest = run_manifest_of(adapter)
        adapter_sha = verify_adapter(adapter, manifest)
        cases, role = load_eval_prompts(request["prompts"], with_split=True)
        check_role(role, request.get("split"), str(request["prompts"]))
        protocol, max_prompt_tokens = resolve_protocol(request.get("protocol"), request.get("decoding"), manifest)
        base_model = resolve_base_model(request.get("base_model"), manifest)

        dataset_path = self._training_dataset(request, manifest)
        if dataset_path:
            cases, isolation = isolate_cases(load_dataset(dataset_path).rows, cases,
                                             drop=bool(request.get("drop_overlap")), dataset_path=dataset_path)
            if isolation["dropped_cases"]:
                yield {"type": "log", "message": f"dropped {len(isolation['dropped_cases'])} held-out case(s) "
                                                 "that the training data contains"}
        else:
            isolation = {"checked": False, "reason": "no training dataset given or found beside the run"}

        with reward_component(request["reward"], request.get("reward_config"),
                              request.get("reward_runtime", "inprocess")) as reward:
            identity = reward.identity()
            results = None
            if request.get("reuse") and Path(request["reuse"]).exists():
                existing = load_json(request["reuse"])
                if reusable(existing, cases, identity, protocol.describe()):
                    results = dict(existing)
                    results["reused_from"] = str(request["reuse"])
                    yield {"type": "log", "message": f"reusing {request['reuse']} (same cases, reward, protocol)"}
            if results is None:
                results = yield from self._generate(base_model, adapter, protocol, max_prompt_tokens, cases, reward,
                                                    request, evaluate)
        results.update({
            "evaluator": {"component": self.full_name, "version": self.version},
            "adapter": {"path": adapter, "sha256": adapter_sha},
            "run": ({"run_id": manifest.get("run_id"), "manifest_sha256": sha256_file(manifest_path_of(adapter))}
                    if manifest else None),
            "prompts": {"path": str(request["prompts"]), "sha256": sha256_file(request["prompts"]),
                        "cases": len(cases), "split": role},
            "split_isolation": isolation,
            "split": request.get("split") or role or "unspecified",
        })
        add_statistics(results)
        if request.get("output"):
            write_json(Path(request["output"]) / RESULTS_FILE, results)
        yield {"type": "completed", "output": str(Path(request["output"]) / RESULTS_FILE)
               if request.get("output") else None, "results": results}

    @staticmethod
    def _training_dataset(request, manifest) -> str | None:
        """The training rows to check: --dataset, else the run's dataset when it is still on disk."""
        if request.get("dataset"):
            return str(request["dataset"])
        recorded = ((manifest or {}).get("dataset") or {}).get("path")
        return recorded if recorded and Path(recorded).exists() else None

    def _generate(self, base_model, adapter, protocol, max_prompt_tokens, cases, reward, request, evaluate):
        yield {"type": "log", "message": f"loading base model {base_model or '(offline default)'} and the adapter"}
        session = load_session(base_model, adapter, {"temperature": protocol.temperature,
                                                     "max_new_tokens": protocol.max_new_tokens, "seed": protocol.seed,
                                                     "max_prompt_tokens": max_prompt_tokens})
        batch = int(request.get("batch_size") or 16)
        rows: list[dict[str, Any]] = []
        first: dict[str, Any] = {}
        for start in range(0, len(cases), batch):
            if self.cancelled:
                raise StatesetError("cancelled")
            part = evaluate(session.backend, session.renderer, reward, cases[start:start + batch], protocol)
            first = first or part
            rows.extend(part["cases"])
            yield {"type": "progress", "step": len(rows), "total": len(cases)}
        base = [r["base"]["score"] for r in rows]
        cand = [r["candidate"]["score"] for r in rows]
        return {"reward": first["reward"], "protocol": first["protocol"],
                "decoding": {**first["decoding"], "max_prompt_tokens": max_prompt_tokens, "batch_size": batch},
                "base_model": session.base_model, "totals": paired_totals(base, cand), "cases": rows}


def check_role(role: str | None, asked: str | None, path: str) -> None:
    """A file's recorded role must be the one asked for: a test file is looked at only through `--split test`
    (which keeps the ledger of test looks), and a validation file is never passed off as test."""
    if role == "test" and asked != "test":
        raise InputError("this is a test file (its rows say split: test); evaluate a nominated checkpoint on it "
                         "with `evaluate --run RUN --split test` (one look per checkpoint, recorded)", path=path,
                         field="split")
    if asked and role and role != asked:
        raise InputError(f"asked for the {asked} split, but the file's rows say split: {role}", path=path,
                         field="split")
