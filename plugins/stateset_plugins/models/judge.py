"""A judge model as the reward (RLAIF): a local causal LM or an OpenAI-compatible chat endpoint reads a rubric and
the conversation, and its verdict ends with ``Score: N``; the reward is N / max_score.

Every verdict is cached by the sha256 of what decides it (judge identity, rubric, max tokens, the conversation up
to the graded turn), in ``RUN/judge_cache.jsonl`` beside its parsed score, so a re-run or a resume asks the judge
nothing twice and reproduces the same rewards. A verdict without a parseable score counts 0 and is kept, marked
``parsed: false``.
"""
from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping

from stateset_agents.core.components import GradeItem
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import digest, dumps_line, sha256_bytes

from stateset_agents.plugin_api.text import content_text

DEFAULT_RUBRIC = ("You grade the last assistant reply of a customer-support conversation. Judge whether it is "
                  "correct, helpful, safe and follows the user's request.")
_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_score(verdict: str, max_score: float) -> float | None:
    """The last ``Score: N`` of the verdict, scaled to [0, 1]; None when there is none."""
    found = _SCORE.findall(verdict or "")
    if not found:
        return None
    return min(1.0, max(0.0, float(found[-1]) / max_score))


def transcript(messages: list[Mapping[str, Any]]) -> str:
    lines = []
    for m in messages:
        text = content_text(m.get("content"))
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)
            text += f"\n[tool call] {fn.get('name')} {json.dumps(fn.get('arguments'), sort_keys=True)}"
        lines.append(f"{m.get('role', '?')}: {text}")
    return "\n".join(lines)


class HTTPJudge:
    """An OpenAI-compatible chat-completions endpoint (``--judge-url``): the `openai` client when installed, else
    one JSON POST with urllib. Temperature 0."""

    def __init__(self, url: str, model: str, timeout: float = 120.0):
        url = url.rstrip("/")
        self.base = url[:-len("/chat/completions")] if url.endswith("/chat/completions") else url
        self.model, self.timeout = model, timeout

    def identity(self) -> dict[str, Any]:
        return {"url": self.base, "model": self.model}

    def cache_identity(self) -> dict[str, Any]:
        return {"model": self.model}  # the same model behind another address (a new port) gives the same verdicts

    def __call__(self, messages: list[dict[str, str]], max_tokens: int) -> str:
        key = os.environ.get("OPENAI_API_KEY", "unused")
        try:
            import openai
        except ImportError:
            openai = None
        try:
            if openai is not None:
                client = openai.OpenAI(base_url=self.base, api_key=key, timeout=self.timeout)
                reply = client.chat.completions.create(model=self.model, messages=messages, temperature=0,
                                                       max_tokens=max_tokens)
                return reply.choices[0].message.content or ""
            body = json.dumps({"model": self.model, "messages": messages, "temperature": 0,
                               "max_tokens": max_tokens}).encode()
            request = urllib.request.Request(f"{self.base}/chat/completions", data=body, method="POST",
                                             headers={"Content-Type": "application/json",
                                                      "Authorization": f"Bearer {key}"})
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())["choices"][0]["message"]["content"] or ""
        except Exception as exc:  # noqa: BLE001 - any transport or shape error fails the run by name
            raise StatesetError(f"judge endpoint {self.base} failed: {type(exc).__name__}: {exc}") from exc


class LocalJudge:
    """A local causal LM (``--judge-model PATH|ID``), greedy decoding through its chat template."""

    def __init__(self, spec: str):
        from .loading import load_base_model

        self.model, self.tokenizer, self.info = load_base_model(spec)
        self.model.eval()

    def identity(self) -> dict[str, Any]:
        return {"model": self.info}

    def cache_identity(self) -> dict[str, Any]:
        return {k: v for k, v in self.info.items() if k != "path"} or self.info

    def __call__(self, messages: list[dict[str, str]], max_tokens: int) -> str:
        import torch

        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = "\n\n".join(m["content"] for m in messages) + "\n\n"
        ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids.to(self.model.device)
        with torch.no_grad():
            out = self.model.generate(ids, max_new_tokens=max_tokens, do_sample=False,
                                      pad_token_id=tok.pad_token_id if tok.pad_token_id is not None
                                      else tok.eos_token_id)
        return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


class JudgeReward:
    """The reward protocol (`grade`, `identity`) over a judge, with the on-disk verdict cache."""

    name = "judge"
    version = "1.0"

    def __init__(self, judge, rubric: str, *, max_new_tokens: int = 64, max_score: float = 10.0,
                 cache_path: str | os.PathLike | None = None):
        self.judge, self.rubric = judge, rubric
        self.max_new_tokens, self.max_score = max_new_tokens, max_score
        self.cache_path = Path(cache_path) if cache_path else None
        self.cache: dict[str, dict[str, Any]] = {}
        self.calls = 0  # judge requests actually made (cache misses)
        if self.cache_path and self.cache_path.exists():
            for raw in self.cache_path.read_bytes().splitlines():
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue  # a partial last line left by a kill
                self.cache[entry["key"]] = entry
        settings = {"rubric_sha256": sha256_bytes(rubric.encode()), "max_new_tokens": max_new_tokens,
                    "max_score": max_score}
        self._identity = {"name": self.name, "version": self.version,
                          "config_sha256": digest({"judge": judge.identity(), **settings})}
        self._cache_scope = digest({"judge": judge.cache_identity(), **settings})

    @classmethod
    def from_config(cls, config, cache_path=None) -> "JudgeReward":
        config.require_judge()
        rubric = DEFAULT_RUBRIC
        if config.rubric:
            try:
                rubric = Path(config.rubric).read_text(encoding="utf-8")
            except FileNotFoundError:
                raise InputError("rubric file not found", path=config.rubric) from None
        judge = HTTPJudge(config.judge_url, config.judge_name) if config.judge_url else LocalJudge(config.judge_model)
        return cls(judge, rubric, max_new_tokens=config.judge_max_new_tokens, max_score=config.judge_max_score,
                   cache_path=cache_path)

    def identity(self) -> dict[str, str]:
        return dict(self._identity)

    def messages(self, conversation: Mapping[str, Any], turn: int) -> list[dict[str, str]]:
        system = (f"{self.rubric.strip()}\n\nReply with a short justification, then a final line "
                  f"'Score: N' with N from 0 to {self.max_score:g}.")
        shown = transcript(list(conversation.get("messages") or [])[:turn + 1])
        return [{"role": "system", "content": system},
                {"role": "user", "content": f"Conversation:\n{shown}\n\nGrade the last assistant reply."}]

    def verdict(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        key = digest({"judge": self._cache_scope, "messages": messages})
        entry = self.cache.get(key)
        if entry is not None:
            return {**entry, "cached": True}
        self.calls += 1
        text = self.judge(messages, self.max_new_tokens)
        score = parse_score(text, self.max_score)
        entry = {"key": key, "verdict": text, "score": 0.0 if score is None else score, "parsed": score is not None}
        self.cache[key] = entry
        if self.cache_path:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.cache_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, dumps_line(entry))  # one write of a whole line, as metrics.jsonl
            finally:
                os.close(fd)
        return {**entry, "cached": False}

    def grade(self, items: Iterable[GradeItem]) -> list[dict[str, Any]]:
        rows = []
        for item in items:
            conv = item.conversation
            turns = list(item.turns) if item.turns is not None else [
                i for i, m in enumerate(conv.get("messages") or []) if m.get("role") == "assistant"]
            for t in turns:
                v = self.verdict(self.messages(conv, t))
                rows.append({"conversation_id": str(conv.get("id", "")), "turn_index": t, "score": v["score"],
                             "applicable": True, "reason": "judge verdict" if v["parsed"] else "no score in verdict",
                             "breakdown": {"verdict": v["verdict"], "parsed": v["parsed"], "cache_key": v["key"],
                                           "cached": v["cached"]},
                             "reward": self.identity()})
        return rows
