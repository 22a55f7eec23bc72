"""`evaluator:paired`: the base model and an adapter answer the same held-out cases with the same decoding settings
and seed; one reward grades both, case by case; the result is eval_results.json with the paired statistics.

Request fields:

* ``prompts`` (path, .txt or .jsonl), ``adapter`` (directory), ``reward`` (name), ``reward_config``,
  ``reward_runtime`` ("inprocess");
* ``base_model``: path, .gguf, hub id; default: the base model in the adapter's run manifest, else the offline
  default;
* ``decoding``: ``temperature``, ``max_new_tokens``, ``seed``, ``max_prompt_tokens``; each defaults to the run's
  training config, else `model_session.DEFAULT_DECODING`;
* ``dataset`` (the training rows to check for overlap; default: the run manifest's dataset, when it is on disk),
  ``drop_overlap`` (drop colliding cases instead of refusing);
* ``output``: directory for eval_results.json (optional: the completed event carries the results either way);
* ``reuse``: an existing eval_results.json to reuse instead of generating, when its cases, reward identity and
  decoding are those of this request (the gate uses this for runs already evaluated on the same prompts);
* ``batch_size`` (16): cases generated at once; each batch is seeded alike for both sides, so pairs stay paired.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

from stateset_agents import Evaluator
from stateset_agents.errors import InputError, StatesetError
from stateset_agents.jsonio import load_json, sha256_file, write_json
from stateset_agents.pipeline.evaluation_stats import add_statistics
from stateset_agents.pipeline.overlap import isolate_cases
from stateset_agents.stats import paired_totals

from . import VERSION
from .model_session import (load_session, resolve_base_model, resolve_decoding, reward_component, run_manifest_of,
                            verify_adapter)

REQUIRED = ("prompts", "adapter", "reward")
RESULTS_FILE = "eval_results.json"


class _TruncationRecorder:
    """Passes calls to the backend and notes which generations ran into max_new_tokens, in call order (the
    trainer's `evaluate` answers base first, then candidate)."""

    def __init__(self, backend):
        self._backend = backend
        self.calls: list[list[bool]] = []

    def generate(self, prompts, **kwargs):
        generations = self._backend.generate(prompts, **kwargs)
        self.calls.append([g.truncated for g in generations])
        return generations

    def __getattr__(self, name):
        return getattr(self._backend, name)


def _case_key(case: Mapping[str, Any]) -> tuple[str, Any]:
    return str(case.get("id")), case.get("prompt")


def reusable(existing: Mapping[str, Any], cases, identity: Mapping[str, Any], decoding: Mapping[str, Any]) -> bool:
    """Whether earlier results answer exactly this request: same cases (id and prompt, in order), same reward
    identity, same decoding."""
    if (existing.get("reward") or {}) != dict(identity):
        return False
    recorded = existing.get("decoding") or {}
    if any(recorded.get(k) != decoding.get(k) for k in ("temperature", "max_new_tokens", "seed")):
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
        from stateset_plugins.trainers.data import load_dataset
        from stateset_plugins.trainers.evaluation import evaluate, load_eval_prompts

        missing = [k for k in REQUIRED if not request.get(k)]
        if missing:
            raise InputError(f"the request lacks {', '.join(missing)}", field=missing[0])
        adapter = str(request["adapter"])
        manifest = run_manifest_of(adapter)
        adapter_sha = verify_adapter(adapter, manifest)
        cases = load_eval_prompts(request["prompts"])
        decoding = resolve_decoding(request.get("decoding"), manifest)
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
                if reusable(existing, cases, identity, decoding):
                    results = dict(existing)
                    results["reused_from"] = str(request["reuse"])
                    yield {"type": "log", "message": f"reusing {request['reuse']} (same cases, reward, decoding)"}
            if results is None:
                results = yield from self._generate(base_model, adapter, decoding, cases, reward, request, evaluate)
        results.update({
            "evaluator": {"component": self.full_name, "version": self.version},
            "adapter": {"path": adapter, "sha256": adapter_sha},
            "run": ({"run_id": manifest.get("run_id"), "manifest_sha256": sha256_file(Path(adapter).parent /
                                                                                     "manifest.json")}
                    if manifest else None),
            "prompts": {"path": str(request["prompts"]), "sha256": sha256_file(request["prompts"]),
                        "cases": len(cases)},
            "split_isolation": isolation,
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

    def _generate(self, base_model, adapter, decoding, cases, reward, request, evaluate):
        yield {"type": "log", "message": f"loading base model {base_model or '(offline default)'} and the adapter"}
        session = load_session(base_model, adapter, decoding)
        recorder = _TruncationRecorder(session.backend)
        config = session.config()
        batch = int(request.get("batch_size") or 16)
        rows: list[dict[str, Any]] = []
        first: dict[str, Any] = {}
        for start in range(0, len(cases), batch):
            if self.cancelled:
                raise StatesetError("cancelled")
            chunk = cases[start:start + batch]
            recorder.calls.clear()
            part = evaluate(recorder, session.renderer, reward, chunk, config)
            first = first or part
            base_flags, cand_flags = recorder.calls[0], recorder.calls[-1]
            for row, b, c in zip(part["cases"], base_flags, cand_flags):
                row["base"].setdefault("truncated", b)
                row["candidate"].setdefault("truncated", c)
            rows.extend(part["cases"])
            yield {"type": "progress", "step": len(rows), "total": len(cases)}
        base = [r["base"]["score"] for r in rows]
        cand = [r["candidate"]["score"] for r in rows]
        return {"reward": first["reward"], "decoding": {**first["decoding"],
                                                          "max_prompt_tokens": decoding["max_prompt_tokens"],
                                                          "batch_size": batch},
                "base_model": session.base_model, "totals": paired_totals(base, cand), "cases": rows}
