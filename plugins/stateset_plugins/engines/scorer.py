"""Our reward plugins behind the engines' reward interfaces: one HTTP JSON server, loopback only, per-launch token.

Two routes, one grader:

* ``POST /openrlhf/<token>``: OpenRLHF's ``--reward.remote_url`` contract (0.11.2, `openrlhf.utils.agent`): a body
  ``{"query": [prompt+response text], "prompts": [prompt text], "labels": [label]}`` answered with
  ``{"rewards": [...], "scores": [...], "extra_logs": {...}}``, one entry per query. Its client sends no headers,
  so the token is a path segment of the URL it is given.
* ``POST /verl`` with ``Authorization: Bearer <token>``: the custom reward function we render for verl
  (`verl_reward.py`) sends ``{"experiment_digest", "items": [{"key", "response"}]}`` and gets ``{"scores": [...]}``.

A label / key names a rendered row, so the reward grades the sampled response as the next assistant turn of that
row's conversation (its prompt messages, tools and metadata), exactly as the native trainer does. Every batch
appends its scores to ``scores.jsonl`` (the digest on each line): the metrics an OpenRLHF run's result is checked
against. Bad input is a 4xx with the reason, never a 500; a missing or wrong token is a 401.
"""
from __future__ import annotations

import hmac
import math
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from stateset_agents.core.components import GradeItem
from stateset_plugins.models.chat_format import parse_assistant

MAX_BODY = 64 << 20
#: end-of-turn texts an engine's decode may leave on a response (OpenRLHF decodes with special tokens)
END_TEXTS = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


class BadRequest(ValueError):
    pass


class Grader:
    """Scores responses to rendered rows with one loaded reward component."""

    def __init__(self, rows: Mapping[str, Mapping[str, Any]], reward, digest: str, log: Path | None = None,
                 end_texts: Sequence[str] = END_TEXTS):
        self.rows, self.reward, self.digest, self.log = rows, reward, digest, log
        self.end_texts = tuple(end_texts)
        self._lock = threading.Lock()
        self.batches = 0

    def _strip(self, text: str) -> str:
        text = text.rstrip()
        changed = True
        while changed:
            changed = False
            for end in self.end_texts:
                if text.endswith(end):
                    text, changed = text[: -len(end)].rstrip(), True
        return text

    def grade(self, items: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        """[(row key, response text)] -> [{"score", "applicable", "reason"}], in order."""
        batch = []
        for key, response in items:
            row = self.rows.get(key)
            if row is None:
                raise BadRequest(f"unknown row {key!r}: labels and keys must be those the adapter rendered")
            messages = [*row["prompt"], parse_assistant(self._strip(response))]
            conversation = {"id": f"{row.get('id', key)}/{key}", "messages": messages,
                            "tools": row.get("tools") or [], "metadata": row.get("metadata") or {}}
            batch.append(GradeItem(conversation, turns=[len(messages) - 1]))
        with self._lock:  # one grading call at a time: rewards need not be thread-safe
            graded = self.reward.grade(batch) if batch else []
            out = []
            for row in graded:
                score = float(row["score"])
                if not math.isfinite(score):
                    raise RuntimeError(f"the reward gave a non-finite score for {row.get('conversation_id')}")
                out.append({"score": score, "applicable": bool(row.get("applicable", True)),
                            "reason": row.get("reason", "")})
            self.batches += 1
            if self.log is not None and out:
                line = {"experiment_digest": self.digest, "batch": self.batches, "count": len(out),
                        "reward_mean": sum(r["score"] for r in out) / len(out),
                        "applicable": sum(r["applicable"] for r in out)}
                with open(self.log, "ab") as f:
                    f.write(orjson.dumps(line) + b"\n")
        return out

    def openrlhf(self, body: Mapping[str, Any]) -> dict[str, Any]:
        queries, prompts, labels = (body.get(k) for k in ("query", "prompts", "labels"))
        if not all(isinstance(v, list) for v in (queries, prompts, labels)) or not (
                len(queries) == len(prompts) == len(labels)):
            raise BadRequest("expected {'query': [...], 'prompts': [...], 'labels': [...]} of equal lengths")
        items = []
        for i, (query, prompt, label) in enumerate(zip(queries, prompts, labels)):
            if not all(isinstance(v, str) for v in (query, prompt, label)):
                raise BadRequest(f"item {i}: query, prompt and label must be strings")
            if not query.startswith(prompt):
                raise BadRequest(f"item {i}: the query does not start with its prompt, so the response is unknown")
            items.append((label, query[len(prompt):]))
        graded = self.grade(items)
        scores = [g["score"] for g in graded]
        return {"rewards": scores, "scores": scores,
                "extra_logs": {"applicable": [1.0 if g["applicable"] else 0.0 for g in graded]}}

    def verl(self, body: Mapping[str, Any]) -> dict[str, Any]:
        if body.get("experiment_digest") != self.digest:
            raise BadRequest(f"experiment digest {body.get('experiment_digest')!r} is not this run's "
                             f"({self.digest})")
        items = body.get("items")
        if not isinstance(items, list) or not all(
                isinstance(i, Mapping) and isinstance(i.get("key"), str) and isinstance(i.get("response"), str)
                for i in items):
            raise BadRequest("expected {'items': [{'key': str, 'response': str}, ...]}")
        graded = self.grade([(i["key"], i["response"]) for i in items])
        return {"scores": [g["score"] for g in graded], "applicable": [g["applicable"] for g in graded],
                "reasons": [g["reason"] for g in graded]}


class _Handler(BaseHTTPRequestHandler):
    server_version = "stateset-scorer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet: the engine's own logs say enough
        pass

    def _send(self, status: int, obj: Any) -> None:
        data = orjson.dumps(obj)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {"ok": True, "experiment_digest": self.server.grader.digest})
        self._send(404, {"error": "not found"})

    def do_POST(self):
        token = self.server.token
        if self.path.startswith("/openrlhf/"):
            given, route = self.path[len("/openrlhf/"):], "openrlhf"
        elif self.path == "/verl":
            given, route = (self.headers.get("Authorization") or "").removeprefix("Bearer "), "verl"
        else:
            return self._send(404, {"error": f"no route {self.path.split('/')[1][:40]!r}"})
        if not hmac.compare_digest(given.encode(), token.encode()):
            return self._send(401, {"error": "unauthenticated: this scorer serves the run that started it"})
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            return self._send(411, {"error": "a Content-Length is required"})
        if length < 0 or length > MAX_BODY:
            return self._send(413, {"error": f"bodies are limited to {MAX_BODY} bytes"})
        try:
            body = orjson.loads(self.rfile.read(length))
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            return self._send(200, getattr(self.server.grader, route)(body))
        except (orjson.JSONDecodeError, BadRequest) as exc:
            return self._send(400, {"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - the reward failed: the engine must not take a score
            return self._send(500, {"error": f"grading failed: {type(exc).__name__}: {exc}"})


class ScorerServer:
    """The grader on 127.0.0.1 (loopback: the engine runs on this machine) with a fresh token; a context manager."""

    def __init__(self, grader: Grader, host: str = "127.0.0.1", port: int = 0):
        self.grader = grader
        self.token = secrets.token_urlsafe(32)
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.grader, self.httpd.token = grader, self.token
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="stateset-scorer", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openrlhf_url(self) -> str:
        return f"{self.url}/openrlhf/{self.token}"

    def __enter__(self) -> "ScorerServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
