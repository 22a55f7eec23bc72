"""The Python face: one trainer class per objective, made from the objective (`trainer_class`), all on the shared
engine. `stateset_agents.training.NAME_trainer` exports each (see `Objective.python_api`).

    from stateset_agents import GRPOTrainer
    trainer = GRPOTrainer(model, tokenizer, reward=my_reward, dataset="improved/curated.jsonl",
                          config={"steps": 20}, output_dir="runs/grpo", eval_prompts="held_out.txt")
    summary = trainer.train()          # raises TrainingFailed if the run did not commit every update

Under torchrun (``train --nproc N``, `launch`) the trainer of each rank takes the world from the environment
(`distributed`): rank 0 alone writes the run directory, evaluates and writes the manifest.

A run whose update or restore broke part-way is quarantined (`quarantine`): `TrainingFailed` with reason
"quarantined", and `resume=True` is refused until `reload=True` restores the latest complete checkpoint.

`events()` yields the same event stream the `trainer:*` components send (progress, metrics, checkpoint, log,
then completed or failed).
"""
from __future__ import annotations

import functools
import threading
import time
import uuid
from typing import Any, Callable, ClassVar, Iterator, Mapping

from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import load_json, sha256_file, write_json
from stateset_agents.plugin_api.checkpoints import (committed_updates, latest_complete, quarantine as quarantined,
                                                    read_receipts, verify_checkpoint)
from stateset_agents.plugin_api.datasets import Dataset, load_dataset, load_eval_prompts
from stateset_plugins.models.backend import LocalTorchBackend
from stateset_plugins.models.evaluation import EvalProtocol, evaluate
from stateset_plugins.models.rendering import ChatRenderer
from stateset_plugins.models.seeding import seed_everything

from . import quarantine
from .engine import Engine
from .manifest import code_versions, write_manifest
from .objectives import Objective, objective_class, objective_names
from .distributed import SINGLE, World, check_supported, rank_seed
from .parent import InitAdapter
from .rundir import RunDir
from .selection import CheckpointValidator, best_step, checkpoint_table, read_records, truncate_records


def refuse_test_file(role: str | None, path) -> None:
    if role == "test":
        raise InputError("this is a test file (its rows say split: test): train evaluates checkpoints on the "
                         "validation file only; the test file is for one look at a nominated checkpoint "
                         "(`nominate`, then `evaluate --split test`)", path=str(path), field="eval_prompts")


class TrainingFailed(StatesetError):
    def __init__(self, event: Mapping[str, Any]):
        self.event = dict(event)
        super().__init__(f"training failed ({event.get('reason')}): {event.get('message')}")


class Quarantined(TrainingFailed):
    """A restore that failed after part of the checkpoint was loaded (raised by the constructor; the run is
    recorded as quarantined); `train_run` turns it into its failed event."""

    def __init__(self, failure: Mapping[str, Any]):
        super().__init__({"type": "failed", **failure})


#: A manifest's status for an engine failure: a stop request saved a checkpoint; a partial update is quarantined.
_STATUS = {"interrupted": "stopped", "quarantined": "quarantined"}


def make_config(objective: Objective | type[Objective], config: Any):
    """The objective's config from None (its defaults), a mapping of its fields, or an instance of its class."""
    cls = objective.Config
    if config is None:
        return cls()
    if isinstance(config, Mapping):
        return cls.from_dict(config)
    if type(config) is not cls:
        raise InputError(f"{objective.name} takes a {cls.__module__}.{cls.__qualname__}, got {type(config).__name__}")
    return config


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(saved) | set(current))
    return [f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}" for k in keys if saved.get(k) != current.get(k)]


class BaseTrainer:
    """The trainer of one objective; `trainer_class` makes the subclass of each (``GRPOTrainer``, ...)."""

    objective_class: ClassVar[type[Objective]]
    algorithm: ClassVar[str] = ""

    def __init__(self, model, tokenizer, reward=None, dataset=None, config=None, *, output_dir=None,
                 eval_prompts=None, resume: bool = False, overwrite: bool = False, base_model_info=None,
                 backend=None, handle_signals: bool = False, stop: threading.Event | None = None,
                 drop_overlap: bool = False, eval_protocol: EvalProtocol | Mapping[str, Any] | None = None,
                 validate_checkpoints: bool = True, init_adapter: str | None = None, reload: bool = False,
                 world: World | None = None, emulate_ranks: int = 0, skip_allreduce: bool = False):
        self.objective = self.objective_class()
        self.config = make_config(self.objective, config)
        self.world = world or SINGLE
        check_supported(self.objective, self.config, max(self.world.size, emulate_ranks),
                        hosted=isinstance(backend, Mapping))
        if dataset is None:
            raise InputError("a dataset is required")
        self.dataset = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
        self.base_model_info = base_model_info or {"source": "in-memory",
                                                   "name": getattr(getattr(model, "config", None), "_name_or_path",
                                                                   None)}
        self.eval_protocol = (eval_protocol if isinstance(eval_protocol, EvalProtocol) else
                              EvalProtocol.from_dict({"seed": self.config.seed, **dict(eval_protocol or {})}))
        self.eval_split, self.eval_sha256 = None, None
        if isinstance(eval_prompts, (str, bytes)) or hasattr(eval_prompts, "__fspath__"):
            self.cases, self.eval_split = load_eval_prompts(eval_prompts, with_split=True)
            self.eval_sha256 = sha256_file(eval_prompts)
            refuse_test_file(self.eval_split, eval_prompts)
        else:
            self.cases = list(eval_prompts or [])
        # Split isolation: a training row whose prompt is a held-out case would make the evaluation meaningless.
        self.split_isolation = None
        if self.cases:
            from stateset_agents.plugin_api.overlap import isolate_training_rows

            self.dataset.rows, self.split_isolation = isolate_training_rows(
                self.dataset.rows, self.cases, drop=drop_overlap, dataset_path=self.dataset.path)
        self.run_dir = RunDir(output_dir) if output_dir else None
        if (resume or reload) and self.run_dir is None:
            raise InputError(f"{'reload' if reload else 'resume'} needs an output directory")
        if self.run_dir and self.world.is_main:
            self.run_dir.prepare(resume=resume, overwrite=overwrite, reload=reload)
        self.world.barrier()  # the other ranks read the run directory once rank 0 has prepared it
        self.reward = self._make_reward(reward)
        self.run_id = uuid.uuid4().hex
        self._log: list[str] = []  # what the constructor did that the event stream reports first
        self.started_at = time.time()
        seed_everything(self.config.seed)  # before the LoRA weights are initialised
        value_head = self.objective.value_head
        if isinstance(backend, Mapping):  # a request's {"kind": "river", ...}: a hosted backend
            from stateset_plugins.models.hosted import backend_from_spec

            backend = backend_from_spec(backend, tokenizer, self.config, value_head=value_head)
        self.backend = backend or LocalTorchBackend(model, tokenizer, self.config, value_head=value_head)
        if self.world.distributed:  # the LoRA weights came from the run's seed on every rank; sampling differs
            seed_everything(rank_seed(self.config.seed, self.world.rank))
        self.renderer = ChatRenderer(tokenizer, self.config.max_prompt_tokens)
        self.engine = Engine(self.backend, self.renderer, self.objective, self.config, self.dataset, self.reward,
                             self.run_dir, handle_signals=handle_signals, stop=stop, world=self.world,
                             emulate_ranks=emulate_ranks, skip_allreduce=skip_allreduce)
        # An SFT parent's adapter as the starting point; on resume the checkpoint's weights replace it, and the
        # identity check makes sure the checkpoint descends from the same parent.
        self.parent = InitAdapter.open(init_adapter) if init_adapter else None
        if self.parent:
            self.parent.check_base_model(self.base_model_info)
        self.validator = (CheckpointValidator(self.backend, self.renderer, self.reward, self.cases, self.eval_protocol,
                                              self.eval_split, self.eval_sha256)
                          if self.cases and self.reward is not None and validate_checkpoints and self.run_dir
                          and self.world.is_main else None)
        if resume or reload:
            self._resume(reload=reload)
        elif self.parent:
            self.parent.load_into(self.backend)

    def _make_reward(self, reward):
        if not self.objective.builds_reward:
            return reward
        if reward is not None:
            raise InputError(f"{self.algorithm} builds its reward from its config (rlaif: judge_model or judge_url), "
                             "not from a reward")
        return self.objective.build_reward(self.config, self.run_dir)

    @property
    def model(self):
        return self.backend.model

    def _identity(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "config": self.config.to_dict(),
                "dataset_sha256": self.dataset.sha256, "dataset_rows": len(self.dataset.rows),
                "base_model": self.base_model_info,
                "init_adapter_sha256": self.parent.adapter_sha256 if self.parent else None}

    def _resume(self, *, reload: bool = False) -> None:
        """Continue from the latest checkpoint (reload: the latest complete one, every file verified against its
        sha256 before anything is loaded). A load that fails part-way quarantines the run."""
        verified = None
        if reload:
            path = latest_complete(self.run_dir.path)
            verified = verify_checkpoint(path)
        else:
            path = self.run_dir.latest_checkpoint()
        state = load_json(path / "state.json")
        saved = {k: state.get(k) for k in ("algorithm", "config", "dataset_sha256", "dataset_rows", "base_model",
                                           "init_adapter_sha256")}
        if isinstance(saved["config"], dict):  # a field added since the checkpoint was written, at its default,
            defaults = type(self.config)().to_dict()  # changes nothing: a run of the older release resumes
            saved["config"] = {**{k: v for k, v in defaults.items() if k not in saved["config"]}, **saved["config"]}
        current = self._identity()
        if saved != current:
            lines = _differences(saved["config"] or {}, current["config"])
            lines += [d for d in _differences({k: v for k, v in saved.items() if k != "config"},
                                              {k: v for k, v in current.items() if k != "config"})]
            raise InputError(f"cannot resume from {path}: the run differs from the checkpoint's ("
                             + "; ".join(lines) + "). Use the checkpoint's settings, or --overwrite to start over",
                             path=str(self.run_dir.path))
        ranks = int(state.get("world_size") or 1)
        if ranks != self.world.size:  # each rank's sampling stream is in the checkpoint: exact only on as many
            raise InputError(f"cannot resume from {path}: it was written by {ranks} process(es) and this run has "
                             f"{self.world.size}; resume with --nproc {ranks}", path=str(path / "state.json"),
                             field="world_size")
        try:
            RunDir.load_checkpoint(path, self.backend, self.world.rank, self.world.size)
        except Exception as exc:  # noqa: BLE001 - the model or optimizer may hold part of the checkpoint now
            self._restore_failed(path, state, exc)
        self.engine.restore(state)
        self.run_id = state.get("run_id", self.run_id)
        self.started_at = state.get("started_at", self.started_at)
        if not self.world.is_main:
            return  # rank 0 trims the records and validates
        if reload:
            self._resolve(path, verified)
        self.run_dir.truncate_metrics(self.engine.step)
        self.engine.receipts.truncate(self.engine.step)
        truncate_records(self.run_dir.path, self.engine.step)
        records = read_records(self.run_dir.path)
        if self.validator is not None and self.engine.step not in {r["step"] for r in records}:
            # killed between saving the checkpoint and validating it: validate it now (the RNG is left as loaded)
            self._validate_checkpoint({"step": self.engine.step, "path": str(path)})
            records = read_records(self.run_dir.path)
        best = best_step(records)
        self.engine.protected_steps = {best} if best is not None else set()

    def _restore_failed(self, path, state: Mapping[str, Any], exc: Exception) -> None:
        good = latest_complete(self.run_dir.path)
        last_good = int(good.name.split("-")[1]) if good is not None else None
        message = f"loading checkpoint {state['step']} ({path.name}) failed part-way: {type(exc).__name__}: {exc}"
        if self.world.distributed:
            message = f"rank {self.world.rank}: {message}"
        if self.world.is_main:
            quarantine.record(self.run_dir.path, "restore", message, step=int(state["step"]), last_good=last_good,
                              checkpoint=path.name)
        failure = quarantine.failure("restore", message, committed=int(state["step"]), update=int(state["step"]),
                                     last_good=last_good, run_path=self.run_dir.path, checkpoint=path.name)
        self._write_manifest("quarantined", None, failure)
        raise Quarantined(failure) from exc

    def _resolve(self, path, verified: Mapping[str, Any]) -> None:
        """After a verified reload: later checkpoints set aside, and the quarantine (if any) moved into the
        history with what resolved it."""
        step = int(verified["step"])
        dropped = sum(1 for r in read_receipts(self.run_dir.path) if int(r.get("step", 0)) > step)
        set_aside = quarantine.set_aside_after(self.run_dir.path, step)
        moved = quarantine.resolve(self.run_dir.path, {"by": "reload", "checkpoint": path.name, "step": step,
                                                       "files": verified["files"], "set_aside": set_aside,
                                                       "receipts_dropped": dropped})
        done = f"; quarantine resolved ({moved.name})" if moved else ""
        self._log.append(f"reloaded checkpoint {step}: {len(verified['files'])} files verified{done}")

    def events(self) -> Iterator[dict[str, Any]]:
        cfg, engine = self.config, self.engine
        for message in self._log:
            yield {"type": "log", "message": message}
        yield {"type": "log", "message": f"{self.algorithm}: {cfg.steps} updates from step {engine.step}, "
                                         f"{len(self.dataset.rows)} rows"}
        extra = {**self._identity(), "run_id": self.run_id, "started_at": self.started_at, "code": code_versions()}
        last_validated: dict[str, Any] | None = None
        for event in engine.run(extra):
            yield event
            if event.get("type") == "checkpoint" and self.validator is not None:
                last_validated = self._validate_checkpoint(event)
                yield {"type": "log", "message": f"checkpoint {event['step']}: validation mean "
                                                 f"{last_validated['record']['candidate_mean']:.4f} (base "
                                                 f"{last_validated['record']['base_mean']:.4f})"}
        if engine.failure:
            self._write_manifest(_STATUS.get(engine.failure["reason"], "failed"), None, engine.failure)
            yield {"type": "failed", **engine.failure}
            return
        if not self.world.is_main:  # rank 0 writes the adapter, evaluates and writes the manifest
            yield {"type": "completed", "step": engine.step, "run_id": self.run_id, "rank": self.world.rank}
            return
        eval_results = None
        if self.run_dir:
            self.run_dir.write_adapter(self.backend)
        if last_validated is not None and last_validated["record"]["step"] == engine.step:
            eval_results = last_validated["results"]  # the final checkpoint is the final adapter: evaluated once
        elif self.cases and self.reward is not None:
            yield {"type": "log", "message": f"evaluating {len(self.cases)} held-out prompts (base vs adapter)"}
            eval_results = (self.validator.evaluate() if self.validator else
                            evaluate(self.backend, self.renderer, self.reward, self.cases, self.eval_protocol))
        if eval_results is not None and self.run_dir:
            write_json(self.run_dir.path / "eval_results.json", eval_results)
        summary = eval_results and {"totals": eval_results["totals"], "reward": eval_results["reward"],
                                    "protocol": eval_results.get("protocol"), "split": eval_results.get("split"),
                                    "truncation": eval_results.get("truncation")}
        self._write_manifest("completed", summary, None)
        yield {"type": "completed", "step": engine.step, "run_id": self.run_id,
               "output": str(self.run_dir.path) if self.run_dir else None, "eval": summary}

    def _validate_checkpoint(self, event: Mapping[str, Any]) -> dict[str, Any]:
        from pathlib import Path

        done = self.validator.at_checkpoint(self.run_dir, int(event["step"]), Path(event["path"]))
        best = best_step(read_records(self.run_dir.path))
        self.engine.protected_steps = {best} if best is not None else set()
        return done

    def _write_manifest(self, status: str, eval_summary, failure) -> None:
        if not self.run_dir or not self.world.is_main:
            return
        identity = self.reward.identity() if self.reward is not None else None
        records = checkpoint_table(self.run_dir.path)
        selection = {"split": self.eval_split or ("unspecified" if self.cases else None),
                     "prompts_sha256": self.eval_sha256, "protocol": self.eval_protocol.describe(),
                     "checkpoints": records, "best_on_validation": best_step(records),
                     "note": "the final checkpoint is not automatically the best: `stateset-agents nominate RUN "
                             "--checkpoint K` records the one to test"}
        receipts = read_receipts(self.run_dir.path)
        committed = committed_updates(receipts)  # counted from the receipts, which `lineage` verifies
        attempted = sum(1 for r in receipts if r.get("phase") != "origin")
        receipt_summary = {"path": "receipts.jsonl", "committed": committed, "attempted": attempted,
                           "last_sha256": self.engine.receipts.last_sha256(),
                           "note": "committed_updates counts the committed receipts"}
        write_manifest(self.run_dir.path, run_id=self.run_id, status=status, algorithm=self.algorithm,
                       config=self.config, base_model=self.base_model_info, dataset=self.dataset,
                       committed=committed, reward=identity, eval_summary=eval_summary, failure=failure,
                       receipts=receipt_summary, quarantine=quarantined(self.run_dir.path),
                       started_at=self.started_at, split_isolation=self.split_isolation,
                       selection=selection, parent=self.parent.lineage() if self.parent else None)

    def train(self) -> dict[str, Any]:
        last: dict[str, Any] = {}
        for event in self.events():
            last = event
        if last.get("type") != "completed":
            raise TrainingFailed(last or {"reason": "no_events", "message": "the run produced no events"})
        return last


@functools.lru_cache(maxsize=None)  # one class per objective, so `isinstance` and resume see the same class
def trainer_class(objective: type[Objective]) -> type[BaseTrainer]:
    """``<Stem>Trainer`` of an `Objective` subclass: the shared trainer with that objective."""
    name = f"{objective.class_stem()}Trainer"
    doc = (f"Trains with {objective.name} on the shared engine; `{objective.class_stem()}Config` holds its fields."
           f"\n\n{objective.__doc__ or ''}").strip()
    return type(name, (BaseTrainer,), {"objective_class": objective, "algorithm": objective.name, "__doc__": doc,
                                        "__module__": objective.__module__, "__qualname__": name})


@functools.lru_cache(maxsize=None)
def train_with(objective: type[Objective]) -> Callable[..., BaseTrainer]:
    """``train_with_<name>(model, tokenizer, dataset, reward, config=None, **kwargs)``: train, return the trainer."""
    trainer = trainer_class(objective)

    def train(model, tokenizer, dataset, reward, config=None, **kwargs) -> BaseTrainer:
        run = trainer(model, tokenizer, reward=reward, dataset=dataset, config=config, **kwargs)
        run.train()
        return run

    train.__name__ = train.__qualname__ = f"train_with_{objective.name}"
    train.__doc__ = f"Train with {objective.name} and return the trainer (its `.model` holds the adapter)."
    return train


class _Trainers(Mapping):
    """``TRAINERS[name]``: the trainer class of every registered objective (first-party or a plugin's)."""

    def __getitem__(self, name: str) -> type[BaseTrainer]:
        if name not in objective_names():
            raise KeyError(name)
        return trainer_class(objective_class(name))

    def __iter__(self) -> Iterator[str]:
        return iter(objective_names())

    def __len__(self) -> int:
        return len(objective_names())


TRAINERS: Mapping[str, type[BaseTrainer]] = _Trainers()


def __getattr__(name: str) -> Any:
    """``GRPOTrainer`` and the others by class name, as `stateset_agents.training` exports them."""
    for algorithm in objective_names() if name.endswith("Trainer") else ():
        cls = objective_class(algorithm)
        if f"{cls.class_stem()}Trainer" == name:
            return trainer_class(cls)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
