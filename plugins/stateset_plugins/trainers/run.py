"""A training run from a JSON-shaped request: what the `trainer:*` components and the `train` command execute.

Request fields: ``algorithm``, ``dataset`` (path), ``reward`` (a reward component name), ``reward_config`` (dict;
``--policy`` arrives as ``{"policy": content}``), ``reward_runtime`` ("inprocess"), ``base_model`` (path, hub id,
.gguf, or None for the offline default), ``eval_prompts`` (path), ``output`` (run directory), ``config`` (dict of
objective fields), ``steps``/``seed``/``save_every`` (override ``config``), ``resume``, ``overwrite``, ``reload``
(resume a quarantined run from its latest complete checkpoint, verified),
``backend`` ({"kind": "river", "run_id", ...}: a hosted backend, see `models.hosted`; default: local torch),
``eval`` (the evaluation protocol: ``samples``, ``temperature``, ``max_new_tokens``, ``allow_truncation``; default
greedy, see `models.evaluation.EvalProtocol`), ``validate_checkpoints`` (True: each checkpoint is evaluated on
``eval_prompts``, the validation split), ``init_adapter`` (a parent run's adapter to start from), ``nproc`` (N > 1:
the run on N processes under torchrun, `launch`; the reward is then a component or ``reward_class``
"module:Class", which each rank builds).
Everything cheap is validated before the model loads, so a bad flag fails in a second, not after a download.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Mapping

from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.plugin_api.datasets import load_dataset, load_eval_prompts
from stateset_plugins.models.loading import load_base_model, load_hosted_tokenizer

from .rundir import RunDir

OVERRIDES = ("steps", "seed", "save_every")


def resolve_config(request: Mapping[str, Any], objective=None):
    from .api import make_config
    from .objectives import get_objective

    values = dict(request.get("config") or {})
    for key in OVERRIDES:
        if request.get(key) is not None:
            values[key] = request[key]
    return make_config(objective or get_objective(request["algorithm"]), values)


@contextlib.contextmanager
def _reward(request: Mapping[str, Any], reward, objective):
    if reward is not None:
        yield reward
        return
    if objective.builds_reward:
        if request.get("reward"):
            raise InputError(f"{objective.name} builds its reward from its config (rlaif: --judge-model or "
                             "--judge-url); drop --reward", field="reward")
        yield None  # the trainer builds it (rlaif: the judge, with its cache in the run directory)
        return
    name = request.get("reward")
    if not name:
        raise InputError("a reward is required (--reward NAME)", field="reward")
    from stateset_agents.core.runtimes import load_component

    full = name if ":" in name else f"reward:{name}"
    component = load_component(full, config=dict(request.get("reward_config") or {}),
                               runtime=request.get("reward_runtime", "inprocess"))
    with component as loaded:
        yield loaded


def train_run(request: Mapping[str, Any], *, reward=None, stop: threading.Event | None = None,
              handle_signals: bool = False, objective=None, world=None) -> Iterator[dict[str, Any]]:
    """Yield the run's events; the last is `completed` or `failed` (errors become a `failed` event). The
    objective is ``request["algorithm"]``'s registered one unless given (a component passes itself)."""
    from .api import Quarantined

    try:
        yield from _train(request, reward, stop, handle_signals, objective, world)
    except Quarantined as exc:  # a restore that failed part-way: recorded, and the stream says so
        yield exc.event
    except StatesetError as exc:
        yield {"type": "failed", "reason": "error", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a stream must end with completed or failed
        yield {"type": "failed", "reason": type(exc).__name__, "message": str(exc)}


def _nproc(request: Mapping[str, Any]) -> int:
    value = request.get("nproc") or 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"nproc must be a positive process count, got {value!r}", field="nproc")
    return value


def _check_launch(request: Mapping[str, Any], reward, config, nproc: int) -> str:
    """What `train --nproc N` needs before anything starts; returns the ranks' device kind ("cpu" or "cuda")."""
    import torch

    if reward is not None and not request.get("reward_class"):
        raise InputError("--nproc: each rank builds its own reward, so give a reward component (--reward NAME) or "
                         "reward_class 'module:Class', not a reward object", field="reward")
    device = str(config.device)
    cuda = device != "cpu" and torch.cuda.is_available()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked for, but torch sees no CUDA device", field="device")
    if cuda and torch.cuda.device_count() < nproc:
        raise InputError(f"--nproc {nproc}: torch sees {torch.cuda.device_count()} GPU(s); one rank per GPU "
                         "(device cpu runs the ranks on the CPU with gloo)", field="nproc")
    return "cuda" if cuda else "cpu"


def _train(request, reward, stop, handle_signals, objective, world) -> Iterator[dict[str, Any]]:
    from .api import trainer_class
    from .objectives import get_objective

    if objective is None:
        algorithm = request.get("algorithm")
        if not isinstance(algorithm, str) or not algorithm:
            raise InputError("an algorithm is required (--algorithm NAME)", field="algorithm")
        objective = get_objective(algorithm)
    config = resolve_config(request, objective)
    objective.check_config(config)  # before the model loads
    if not request.get("output"):
        raise InputError("an output directory is required", field="output")
    dataset = load_dataset(request["dataset"])
    from stateset_plugins.models.evaluation import EvalProtocol

    protocol = EvalProtocol.from_dict({"seed": config.seed, **dict(request.get("eval") or {})})
    eval_prompts = request.get("eval_prompts")
    if eval_prompts:  # a bad file, a test file or a missing parent fails before the model loads
        from .api import refuse_test_file

        refuse_test_file(load_eval_prompts(eval_prompts, with_split=True)[1], eval_prompts)
    if request.get("init_adapter"):
        from .parent import InitAdapter

        InitAdapter.open(request["init_adapter"])
    resume, overwrite, reload = bool(request.get("resume")), bool(request.get("overwrite")), bool(request.get("reload"))
    RunDir(request["output"]).check(resume=resume, overwrite=overwrite, reload=reload)  # before the model loads
    nproc = _nproc(request)
    if world is not None and world.size != nproc:
        raise InputError(f"this rank's world has {world.size} processes, the request asks for {nproc}", field="nproc")
    if nproc > 1 and world is None:  # this process launches the ranks and relays rank 0's events
        from .distributed import check_supported
        from .launch import run_distributed

        check_supported(objective, config, nproc, hosted=bool(request.get("backend")))
        device = _check_launch(request, reward, config, nproc)
        yield from run_distributed(request, nproc, stop, device)
        return
    with _reward(request, reward, objective) as grader:
        yield {"type": "log", "message": f"loading base model {request.get('base_model') or '(offline default)'}"}
        backend = request.get("backend")
        if backend:  # a hosted backend holds the weights: only the tokenizer is loaded here
            tokenizer, info = load_hosted_tokenizer(request.get("base_model"), served_by=str(backend.get("kind")))
            model = None
            backend = {**backend, "base_model": request.get("base_model")}
        else:
            model, tokenizer, info = load_base_model(request.get("base_model"), request.get("base_model_revision"))
        trainer, cls = None, trainer_class(type(objective))
        try:
            trainer = cls(model, tokenizer, reward=grader, dataset=dataset, config=config,
                          output_dir=request["output"], eval_prompts=eval_prompts, resume=resume,
                          overwrite=overwrite, reload=reload, base_model_info=info, handle_signals=handle_signals,
                          stop=stop, drop_overlap=bool(request.get("drop_overlap")), backend=backend,
                          eval_protocol=protocol, init_adapter=request.get("init_adapter"),
                          validate_checkpoints=request.get("validate_checkpoints", True) is not False,
                          world=world, emulate_ranks=int(request.get("_emulate_ranks") or 0),  # test-only
                          skip_allreduce=bool(request.get("_test_skip_allreduce")))  # test-only
            yield from trainer.events()
        finally:
            close = getattr(getattr(trainer, "backend", None), "close", None)
            if close:
                close()  # a hosted session ends with the run, whatever ended it
