"""`evaluator:judge`: pairwise judging of a paired evaluation's answers by a pinned local judge, for benchmarking
only (never the improve loop).

Each case is judged twice, the base model's and the adapter's answers shown in one order and then reversed; a case is
a win (or a loss) only when both passes agree, otherwise it is undecided. The report gives how often the judge kept
its verdict when the order was reversed (`consistency`): a judge that always prefers the first answer keeps it
never, and yields no wins. Every judge prompt and output is kept (judge_results.json), and `replay` re-runs the
recorded prompts against the judge the results name, checks its weights' sha256, and reports every changed verdict.

Request fields: ``results`` (an eval_results.json: the answers to judge), ``judge`` (a local model directory or
.gguf file: hub ids are refused, no network), ``rubric`` (text file), ``output`` (directory), ``max_new_tokens``
(64); or ``replay`` (a directory holding judge_results.json). `judge_loader` (Python only) replaces the model
loader, for scripted judges in tests.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from stateset_agents import Evaluator
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import digest, load_json, sha256_bytes, sha256_file, write_json
from stateset_agents.plugin_api.stats import sign_flip_p_value

from . import VERSION

JUDGE_RESULTS = "judge_results.json"
SCHEMA_VERSION = 1
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
_WINNER = re.compile(r"winner\s*[:=]\s*(A|B|tie)\b", re.IGNORECASE)
ORDERS = (("base", "candidate"), ("candidate", "base"))


def weights_sha256(spec: str | Path) -> str:
    """The judge's weights: the .gguf file's sha256, or a digest of every weight file of the directory."""
    p = Path(spec)
    if p.is_file():
        return sha256_file(p)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in WEIGHT_SUFFIXES)
        if not files:
            raise InputError("the judge directory holds no weight file", path=str(p), field="judge")
        return digest({str(f.relative_to(p)): sha256_file(f) for f in files})
    raise InputError("the judge must be a local model directory or .gguf file (pinned by its sha256; hub ids are "
                     "refused: no network)", path=str(spec), field="judge")


def load_local_judge(spec: str):
    from stateset_plugins.models.judge import LocalJudge

    return LocalJudge(spec)


def parse_winner(text: str) -> str | None:
    """The last ``Winner: A|B|tie`` of a verdict; None when there is none."""
    found = _WINNER.findall(text or "")
    return found[-1].upper() if found and found[-1].lower() != "tie" else ("tie" if found else None)


def judge_messages(rubric: str, prompt: list[Mapping[str, Any]], first: str, second: str) -> list[dict[str, str]]:
    from stateset_plugins.models.judge import transcript

    system = (f"{rubric.strip()}\n\nYou compare two replies, A and B, to the same conversation. Reply with a short "
              "justification, then a final line 'Winner: A', 'Winner: B' or 'Winner: tie'.")
    user = (f"Conversation:\n{transcript(list(prompt))}\n\nReply A:\n{first}\n\nReply B:\n{second}\n\n"
            "Which reply is better?")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _answer_text(side: Mapping[str, Any]) -> str:
    from stateset_plugins.models.judge import transcript

    return transcript([side["output"]]).split(": ", 1)[-1] if side.get("output") else str(side.get("text") or "")


def _model_of(letter: str | None, order: tuple[str, str]) -> str | None:
    if letter in ("A", "B"):
        return order[0] if letter == "A" else order[1]
    return letter  # "tie" or None (no verdict)


def outcome(passes: list[Mapping[str, Any]]) -> str:
    a, b = (p["preferred"] for p in passes)
    if a == b == "candidate":
        return "win"
    if a == b == "base":
        return "loss"
    return "tie" if a == b == "tie" else "undecided"


def summarise(cases: list[Mapping[str, Any]]) -> dict[str, Any]:
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("win", "loss", "tie", "undecided")}
    kept = sum(c["passes"][0]["preferred"] == c["passes"][1]["preferred"] and c["passes"][0]["preferred"] is not None
               for c in cases)
    unparsed = sum(p["preferred"] is None for c in cases for p in c["passes"])
    first = sum(p["letter"] == "A" for c in cases for p in c["passes"])
    signs = [1.0 if c["outcome"] == "win" else -1.0 if c["outcome"] == "loss" else 0.0 for c in cases]
    return {"cases": len(cases), **counts, "consistency": kept / len(cases) if cases else None,
            "first_position_rate": first / (2 * len(cases)) if cases else None, "unparsed_verdicts": unparsed,
            "p_value": sign_flip_p_value(signs)[0] if any(signs) else 1.0,
            "note": "a win counts only when both orders agree; consistency is the share of cases whose verdict "
                    "survived reversing the order (a small judge is weak: read the wins beside it)"}


class JudgeEvaluator(Evaluator):
    name = "judge"
    version = VERSION
    capabilities = ("pairwise", "judge", "replay")

    def __init__(self, config: Mapping[str, Any] | None = None, judge_loader: Callable[[str], Any] | None = None):
        super().__init__(config)
        self.judge_loader = judge_loader or load_local_judge

    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            request = {**self.config, **dict(request)}
            yield from (self._replay(request) if request.get("replay") else self._judge(request))
        except StatesetError as exc:
            yield {"type": "failed", "reason": "error", "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a stream must end with completed or failed
            yield {"type": "failed", "reason": type(exc).__name__, "message": str(exc)}

    def _load(self, spec: str):
        sha = weights_sha256(spec)
        return self.judge_loader(str(spec)), sha

    def _ask(self, judge, messages, max_new_tokens: int) -> dict[str, Any]:
        text = judge(messages, max_new_tokens)
        return {"output": text, "letter": parse_winner(text)}

    def _judge(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for key in ("results", "judge", "rubric", "output"):
            if not request.get(key):
                raise InputError(f"the request lacks {key}", field=key)
        rubric_path = Path(request["rubric"])
        if not rubric_path.is_file():
            raise InputError("rubric file not found", path=str(rubric_path), field="rubric")
        rubric = rubric_path.read_text(encoding="utf-8")
        results = load_json(request["results"])
        max_new_tokens = int(request.get("max_new_tokens") or 64)
        judge, sha = self._load(request["judge"])
        yield {"type": "log", "message": f"judge {request['judge']} (weights sha256 {sha[:12]}...)"}
        cases = []
        for i, case in enumerate(results.get("cases") or []):
            texts = {"base": _answer_text(case["base"]), "candidate": _answer_text(case["candidate"])}
            passes = []
            for order in ORDERS:
                messages = judge_messages(rubric, case["prompt"], texts[order[0]], texts[order[1]])
                asked = self._ask(judge, messages, max_new_tokens)
                passes.append({"order": list(order), "messages": messages, **asked,
                               "preferred": _model_of(asked["letter"], order)})
            cases.append({"id": case.get("id"), "passes": passes, "outcome": outcome(passes)})
            yield {"type": "progress", "step": i + 1, "total": len(results.get("cases") or [])}
        if not cases:
            raise InputError("the results hold no cases to judge", path=str(request["results"]))
        record = {"schema_version": SCHEMA_VERSION, "evaluator": {"component": self.full_name,
                                                                  "version": self.version},
                  "judge": {"spec": str(request["judge"]), "weights_sha256": sha,
                            "identity": getattr(judge, "identity", lambda: None)()},
                  "rubric": {"path": str(rubric_path), "sha256": sha256_bytes(rubric.encode())},
                  "max_new_tokens": max_new_tokens,
                  "answers": {"path": str(request["results"]), "sha256": sha256_file(request["results"])},
                  "summary": summarise(cases), "cases": cases}
        write_json(Path(request["output"]) / JUDGE_RESULTS, record)
        yield {"type": "completed", "output": str(Path(request["output"]) / JUDGE_RESULTS), "results": record}

    def _replay(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        path = Path(request["replay"]) / JUDGE_RESULTS
        if not path.is_file():
            raise InputError(f"no {JUDGE_RESULTS} to replay", path=str(path))
        record = load_json(path)
        spec = request.get("judge") or record["judge"]["spec"]
        judge, sha = self._load(spec)
        changed, total = [], 0
        for i, case in enumerate(record["cases"]):
            for k, recorded in enumerate(case["passes"]):
                total += 1
                again = self._ask(judge, recorded["messages"], int(record.get("max_new_tokens") or 64))
                if again["letter"] != recorded["letter"] or again["output"] != recorded["output"]:
                    changed.append({"id": case["id"], "pass": k, "order": recorded["order"],
                                    "recorded": recorded["letter"], "now": again["letter"],
                                    "verdict_changed": again["letter"] != recorded["letter"],
                                    "recorded_output": recorded["output"], "output": again["output"]})
            yield {"type": "progress", "step": i + 1, "total": len(record["cases"])}
        report = {"replayed": str(path), "judge": {"spec": str(spec), "weights_sha256": sha,
                                                   "recorded_weights_sha256": record["judge"]["weights_sha256"],
                                                   "weights_changed": sha != record["judge"]["weights_sha256"]},
                  "prompts": total, "changed": changed,
                  "changed_verdicts": sum(c["verdict_changed"] for c in changed)}
        yield {"type": "completed", "output": None, "results": report}
