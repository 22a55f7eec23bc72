"""Fail-closed: an untested engine version is refused before anything is written, results without valid
artifacts or with non-finite metrics are refused, and the scorer refuses unauthenticated or malformed calls."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import orjson
import pytest

from stateset_agents.core.errors import StatesetError
from stateset_agents.core.runtimes import load_component
from stateset_plugins.engines import openrlhf, verl
from stateset_plugins.engines.component import VerlTrainer
from stateset_plugins.engines.conformance import SAMPLE_ROWS, write_sample
from stateset_plugins.engines.pins import require_engine
from stateset_plugins.engines.render import keyed_rows
from stateset_plugins.engines.scorer import Grader, ScorerServer

DIGEST = "d" * 64


def _venv_with(tmp_path, version):
    """A real venv whose site-packages records `verl` at `version` (or none)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    if version:
        site = next((venv / "lib").glob("python3*/site-packages"))
        info = site / f"verl-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: verl\nVersion: {version}\n")
    return venv / "bin" / "python"


@pytest.mark.parametrize("version", ["0.9.0", None])
def test_an_untested_or_missing_engine_version_is_refused(tmp_path, version):
    python = _venv_with(tmp_path, version)
    with pytest.raises(StatesetError) as caught:
        require_engine("verl", python)
    message = str(caught.value)
    assert f"installed verl {version or 'not installed'}" in message
    assert "verl==0.9.1" in message and "python -m stateset_plugins.engines.conformance verl" in message
    # the trainer fails before it renders anything
    dataset = write_sample(tmp_path / "d.jsonl")
    events = list(VerlTrainer().run({"dataset": str(dataset), "reward": "gsm8k", "base_model": "m",
                                     "output": str(tmp_path / "run"),
                                     "config": {"engine_python": str(python), "render_only": True}}))
    assert events[-1]["type"] == "failed" and "0.9.1" in events[-1]["message"]
    assert not (tmp_path / "run").exists()


def _metrics(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def test_verl_results_need_finite_metrics_and_a_checkpoint(tmp_path):
    with pytest.raises(StatesetError, match="no metrics"):
        verl.collect(tmp_path, DIGEST)
    _metrics(tmp_path / verl.METRICS, [{"step": 1, "data": {"critic/score/mean": 0.5}},
                                        {"step": 2, "data": {"critic/score/mean": float("nan")}}])
    with pytest.raises(StatesetError, match="row 2 has critic/score/mean=None"):  # orjson wrote NaN as null
        verl.collect(tmp_path, DIGEST)
    (tmp_path / verl.METRICS).write_text('{"step": 1, "data": {"critic/score/mean": NaN}}\n')
    with pytest.raises(StatesetError, match="row 1 has critic/score/mean=nan"):
        verl.collect(tmp_path, DIGEST)
    (tmp_path / verl.METRICS).write_text('{"step": 1, "da\n')
    with pytest.raises(StatesetError, match="line 1 is not JSON"):
        verl.collect(tmp_path, DIGEST)
    _metrics(tmp_path / verl.METRICS, [{"step": 1, "data": {"critic/score/mean": 0.5}}])
    with pytest.raises(StatesetError, match="no checkpoint"):
        verl.collect(tmp_path, DIGEST)
    step = tmp_path / verl.CHECKPOINTS / "global_step_1" / "actor"
    step.mkdir(parents=True)
    with pytest.raises(StatesetError, match="no checkpoint"):  # an empty folder is no checkpoint
        verl.collect(tmp_path, DIGEST)
    (step / "adapter_model.safetensors").write_bytes(b"weights")
    result = verl.collect(tmp_path, DIGEST)
    assert result["experiment_digest"] == DIGEST and result["steps"] == 1
    assert result["checkpoint"] == "checkpoints/global_step_1"


def test_openrlhf_results_need_this_runs_finite_scores_and_weights(tmp_path):
    with pytest.raises(StatesetError, match="no reward"):
        openrlhf.collect(tmp_path, DIGEST)
    _metrics(tmp_path / openrlhf.SCORES, [{"experiment_digest": "e" * 64, "reward_mean": 0.5}])
    with pytest.raises(StatesetError, match="another experiment"):
        openrlhf.collect(tmp_path, DIGEST)
    _metrics(tmp_path / openrlhf.SCORES, [{"experiment_digest": DIGEST, "reward_mean": 0.5}])
    with pytest.raises(StatesetError, match="no weights"):
        openrlhf.collect(tmp_path, DIGEST)
    (tmp_path / openrlhf.MODEL).mkdir()
    (tmp_path / openrlhf.MODEL / "adapter_model.safetensors").write_bytes(b"weights")
    assert openrlhf.collect(tmp_path, DIGEST)["reward_batches"] == 1


def _post(url, body, headers=None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_scorer_refuses_strangers_and_bad_input_and_scores_with_our_reward(tmp_path):
    with load_component("reward:gsm8k", runtime="inprocess") as reward, \
            ScorerServer(Grader(keyed_rows(SAMPLE_ROWS), reward, DIGEST, log=tmp_path / "scores.jsonl")) as s:
        assert s.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(s.url + "/health", timeout=30) as reply:
            assert json.loads(reply.read())["experiment_digest"] == DIGEST
        good = {"experiment_digest": DIGEST, "items": [{"key": "r0", "response": "#### 42"},
                                                       {"key": "r1", "response": "#### 9"}]}
        assert _post(s.url + "/verl", good)[0] == 401
        assert _post(s.url + "/verl", good, {"Authorization": "Bearer nope"})[0] == 401
        assert _post(s.url + "/openrlhf/nope", {"query": [], "prompts": [], "labels": []})[0] == 401
        auth = {"Authorization": f"Bearer {s.token}"}
        assert _post(s.url + "/verl", b"{not json", auth)[0] == 400
        assert _post(s.url + "/verl", {**good, "experiment_digest": "x"}, auth)[0] == 400
        assert _post(s.url + "/verl", {**good, "items": [{"key": "r99", "response": ""}]}, auth)[0] == 400
        assert _post(s.url + "/nowhere", good, auth)[0] == 404
        status, reply = _post(s.url + "/verl", good, auth)
        assert status == 200 and reply["scores"] == [1.0, 0.0]
        status, reply = _post(s.openrlhf_url, {"query": ["P: #### 42<|im_end|>"], "prompts": ["P: "],
                                               "labels": ["r0"]})
        assert status == 200 and reply["rewards"] == [1.0] and reply["scores"] == [1.0]
        assert _post(s.openrlhf_url, {"query": ["Q #### 42"], "prompts": ["P: "], "labels": ["r0"]})[0] == 400
        assert _post(s.openrlhf_url, {"query": ["x"], "prompts": ["x", "y"], "labels": ["r0"]})[0] == 400
    lines = [orjson.loads(line) for line in (tmp_path / "scores.jsonl").read_bytes().splitlines()]
    assert [(l["count"], l["reward_mean"], l["experiment_digest"]) for l in lines] == [(2, 0.5, DIGEST),
                                                                                       (1, 1.0, DIGEST)]
