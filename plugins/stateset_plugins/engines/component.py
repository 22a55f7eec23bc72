"""The `trainer:verl`, `trainer:openrlhf` and `trainer:nemo_rl` components: plan, digest, version check, render,
and (verl, OpenRLHF) a launch in the engine's own venv with our scorer serving the rewards, results checked.

Request: what `train` sends (``dataset``, ``reward``, ``reward_config``, ``base_model``, ``output``, ``steps``,
``seed``, ``save_every``, ``config``). Config fields (``--config`` or the flags `register_options` adds):
``engine_algorithm`` (grpo, ppo, gspo, dapo), ``model_revision``, ``engine_config`` (the engine's own settings),
``render_only`` (stop after rendering: nothing is trained, and the final event says so), ``engine_python`` (the
engine venv's Python; default: the venv `scripts/engine-venvs` builds).
"""
from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping

from stateset_agents import Trainer
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import write_json

from . import nemo_rl, openrlhf, verl
from .pins import ENGINES, require_engine
from .plan import build_plan, experiment_digest, write_manifest
from .render import keyed_rows

VERSION = "0.1.0"
ENGINE_DIR = "engine"
RESULTS = "engine_results.json"

CONFIG_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "engine_algorithm": {"type": "string"}, "model_revision": {"type": ["string", "null"]},
        "engine_config": {"type": "object"}, "render_only": {"type": "boolean"},
        "engine_python": {"type": ["string", "null"]}, "steps": {"type": "integer", "minimum": 1},
        "seed": {"type": "integer"}, "save_every": {"type": "integer", "minimum": 1},
    },
}


class EngineTrainer(Trainer):
    engine: str = ""
    algorithms: tuple[str, ...] = ()
    capabilities = ["local", "gpu", "external_engine"]
    config_schema = CONFIG_SCHEMA
    launches = True

    @classmethod
    def example_config(cls) -> dict[str, Any]:
        return {"render_only": True}

    # -- the engine's part
    def render(self, out: Path, plan: Mapping[str, Any], digest: str, rows: list) -> list[str]:
        raise NotImplementedError

    def launch(self, out: Path, python: Path, scorer) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def collect(self, out: Path, digest: str) -> dict[str, Any]:
        raise NotImplementedError

    # -- shared
    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        config = {**dict(self.config), **dict(request.get("config") or {})}
        try:
            yield from self._run({**dict(request), "config": config})
        except StatesetError as exc:
            yield {"type": "failed", "message": str(exc)}

    def _run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        from stateset_agents.core.runtimes import load_component
        from stateset_agents.plugin_api.datasets import load_dataset

        for field in ("dataset", "reward", "output", "base_model"):
            if not request.get(field):
                raise InputError(f"trainer:{self.engine} needs {field!r} (train --{field.replace('_', '-')})",
                                 field=field)
        config = dict(request.get("config") or {})
        spec = ENGINES[self.engine]
        python = None
        render_only = bool(config.get("render_only")) or not self.launches
        if spec.installable:  # fail closed before anything is written: only the tested version runs
            python = require_engine(self.engine, config.get("engine_python"))
        data = load_dataset(request["dataset"])
        reward_name = request["reward"] if ":" in request["reward"] else f"reward:{request['reward']}"
        with load_component(reward_name, config=dict(request.get("reward_config") or {}),
                            runtime=request.get("reward_runtime", "inprocess")) as reward:
            plan = build_plan(spec, {**request, "reward": reward_name}, algorithms=self.algorithms,
                              capabilities=self.capabilities, reward_version=getattr(reward, "version", None),
                              dataset_sha256=data.sha256, rows=len(data.rows))
            plan["adapter"] = {"name": f"trainer:{self.engine}", "version": VERSION}
            digest = experiment_digest(plan)
            out = (Path(request["output"]) / ENGINE_DIR).resolve()
            out.mkdir(parents=True, exist_ok=True)
            files = self.render(out, plan, digest, data.rows)
            write_manifest(out, plan, digest, files, validated=spec.installable,
                           engine_python=str(python) if python else None)
            yield {"type": "log", "message": f"trainer:{self.engine}: experiment {digest[:12]} rendered in {out}"}
            if render_only:
                note = nemo_rl.NOTICE if not self.launches else "render-only: nothing was trained"
                yield {"type": "log", "message": note}
                yield {"type": "completed", "run_id": digest, "experiment_digest": digest, "step": 0,
                       "rendered": True, "trained": False, "validated": spec.installable, "output": str(out)}
                return
            yield from self._launch(out, python, plan, digest, data.rows, reward)

    def _launch(self, out, python, plan, digest, rows, reward) -> Iterator[dict[str, Any]]:
        from .scorer import Grader, ScorerServer

        grader = Grader(keyed_rows(rows), reward, digest, log=out / openrlhf.SCORES)
        with ScorerServer(grader) as scorer:
            argv, env = self.launch(out, python, scorer)
            proc = subprocess.Popen([str(python), *argv], cwd=out, env={**os.environ, **env}, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            stop = threading.Thread(target=self._watch_cancel, args=(proc,), daemon=True)
            stop.start()
            for line in proc.stdout:
                yield {"type": "log", "message": line.rstrip()[:2000]}
            code = proc.wait()
        if self._cancel.is_set():
            yield {"type": "failed", "reason": "interrupted", "message": f"{self.engine} stopped on request"}
            return
        if code != 0:
            yield {"type": "failed", "message": f"{self.engine} exited with code {code} (experiment {digest[:12]})"}
            return
        results = self.collect(out, digest)  # refuses missing artifacts and non-finite metrics
        write_json(out / RESULTS, results)
        yield {"type": "completed", "run_id": digest, "experiment_digest": digest, "step": results.get("steps"),
               "trained": True, "results": results, "output": str(out)}

    def _watch_cancel(self, proc) -> None:
        while proc.poll() is None:
            if self._cancel.wait(0.5):
                proc.terminate()
                return


class VerlTrainer(EngineTrainer):
    name, version, engine = "verl", VERSION, "verl"
    algorithms = tuple(verl.ALGORITHMS)

    def render(self, out, plan, digest, rows):
        return verl.render(out, plan, digest, rows, Path(__file__).with_name("verl_reward.py"))

    def launch(self, out, python, scorer):
        lines = (out / "overrides.txt").read_text(encoding="utf-8").splitlines()
        return ["-m", "verl.trainer.main_ppo", *lines], verl.launch_env(out, scorer)

    def collect(self, out, digest):
        return verl.collect(out, digest)


class OpenRLHFTrainer(EngineTrainer):
    name, version, engine = "openrlhf", VERSION, "openrlhf"
    algorithms = tuple(openrlhf.ALGORITHMS)

    def render(self, out, plan, digest, rows):
        return openrlhf.render(out, plan, digest, rows)

    def launch(self, out, python, scorer):
        import orjson

        argv = orjson.loads((out / "args.json").read_bytes())["argv"]
        return ["-m", "openrlhf.cli.train_ppo_ray", *openrlhf.launch_argv(argv, scorer)], {}

    def collect(self, out, digest):
        return openrlhf.collect(out, digest)


class NemoRLTrainer(EngineTrainer):
    name, version, engine = "nemo_rl", VERSION, "nemo_rl"
    algorithms = nemo_rl.ALGORITHMS
    launches = False

    def render(self, out, plan, digest, rows):
        return nemo_rl.render(out, plan, digest, rows)
