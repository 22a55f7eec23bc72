"""Test-only ingestors for `ingest --workers` (test_ingest_workers.py), loaded through STATESET_AGENTS_PLUGIN_MODULES
so every worker process finds them.

`ingest_probe` ingests as `ingestor:openai` and, per `config.policy`:
* `parsed_by`: a file each run of lines parsed apart (`part=True`) appends "PID FIRST_LINE" to (who parsed what);
* `die_in_worker` with `parent`: a worker process (any process but `parent`, the test runner) ends itself with
  `os._exit` on its first run of lines: no answer, no cleanup;
* `explode_at`: raises on the line with that number, wherever it is parsed.
"""
from __future__ import annotations

import itertools
import os

from stateset_agents import hookimpl
from stateset_plugins.ingestors.log_ingestor import LogIngestor
from stateset_plugins.ingestors.openai import OpenAIIngestor


class ProbeIngestor(OpenAIIngestor):
    name, version = "ingest_probe", "1.0.0"
    config_schema = {"type": "object", "properties": {**LogIngestor.config_schema["properties"],
                                                      "policy": {"type": "object"}},
                     "additionalProperties": False}

    def ingest_lines(self, source, lines, *, part=False):
        policy = self.config.get("policy") or {}
        lines = iter(lines)
        first = next(lines, None)
        if first is None:
            return
        if part and policy.get("parsed_by"):
            with open(policy["parsed_by"], "a") as f:
                f.write(f"{os.getpid()} {first[0]}\n")
        if part and policy.get("die_in_worker") and os.getpid() != policy.get("parent"):
            os._exit(3)
        explode_at = policy.get("explode_at")

        def checked():
            for number, raw in itertools.chain([first], lines):
                if number == explode_at:
                    raise RuntimeError(f"asked to explode at line {number}")
                yield number, raw

        yield from super().ingest_lines(source, checked(), part=part)


@hookimpl
def register_ingestors(register):
    register(ProbeIngestor)
