"""The native engine on 2 processes (torchrun, gloo on the CPU, one thread a rank): the same adapter as one process
training on the same global batch, a comparison that fails without the gradient all-reduce, and SIGKILL + --resume
giving the same bytes as an uninterrupted 2-process run. Plus what is refused before anything starts."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from stateset_plugins.trainers.launch import torchrun_command
from stateset_plugins.trainers.run import train_run
from tests.helpers.toy_rewards import DigitReward, make_rows, write_rows

STEPS = 3
REWARD = "tests.helpers.toy_rewards:DigitReward"  # each rank builds its own (rewards are scored per rank)
#: The measured agreement is ~3e-7 (relative L2 of the adapter after 3 updates); the issue's bound is 1e-5.
TOLERANCE = 1e-5


def request(root: Path, out: str, **more) -> dict:
    data = root / "rows.jsonl"
    if not data.exists():
        write_rows(data, make_rows(8))
    return {"algorithm": "grpo", "dataset": str(data), "base_model": str(root / "model"), "output": str(root / out),
            "steps": STEPS, "save_every": 1,
            "config": {"max_new_tokens": 8, "batch_size": 4, "num_generations": 4, "learning_rate": 2e-2,
                       "device": "cpu"}, **more}


def ddp(root: Path, out: str, **more) -> list[dict]:
    return list(train_run(request(root, out, nproc=2, reward_class=REWARD, **more)))


def adapter(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run / "adapter" / "adapter_model.safetensors"))


def relative_difference(a: dict, b: dict) -> float:
    """||a - b|| / ||b|| over every adapter tensor together."""
    assert a.keys() == b.keys()
    num = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in a)
    den = sum(float(b[k].double().pow(2).sum()) for k in b)
    return (num / den) ** 0.5


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """One process over the 2-rank global batch (each rank's share sampled under that rank's RNG stream, then one
    update on the whole batch), and the 2-process run, once for the module."""
    root = tmp_path_factory.mktemp("ddp")
    shutil.copytree(tiny_model_dir, root / "model")
    one = list(train_run(request(root, "one", _emulate_ranks=2), reward=DigitReward()))
    two = ddp(root, "two")
    assert one[-1]["type"] == "completed", one[-1]
    assert two[-1]["type"] == "completed", two[-1]
    return root


def test_two_ranks_match_one_process_over_the_same_global_batch(runs):
    one, two = runs / "one", runs / "two"
    difference = relative_difference(adapter(two), adapter(one))
    assert difference <= TOLERANCE
    print(f"relative L2 difference of the adapters after {STEPS} updates: {difference:.2e}")
    read = lambda run: [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    for a, b in zip(read(one), read(two)):  # the same samples and rewards: the same global batch
        assert a["reward_mean"] == pytest.approx(b["reward_mean"], abs=1e-6)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-7)
        assert b["world_size"] == 2 and a["rollout_tokens"] == b["rollout_tokens"]
    receipts = [json.loads(x) for x in (two / "receipts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in receipts] == [1, 2, 3] and all(r["committed"] for r in receipts)
    assert all(len(r["rank_batch_sha256"]) == 2 and len(set(r["rank_batch_sha256"])) == 2 for r in receipts)
    # written once, by rank 0; the checkpoint holds both ranks' RNG streams and the (global) data cursor
    last = two / "checkpoints" / "step-000003"
    state = json.loads((last / "state.json").read_text())
    assert state["world_size"] == 2 and state["cursor"] == json.loads(
        (one / "checkpoints" / "step-000003" / "state.json").read_text())["cursor"]
    blob = torch.load(last / "training_state.pt", weights_only=False)
    streams = blob["rank_rng"]
    assert len(streams) == 2 and not torch.equal(streams[0]["torch"], streams[1]["torch"])
    assert torch.equal(blob["rng"]["torch"], streams[0]["torch"])
    assert json.loads((two / "manifest.json").read_text())["status"] == "completed"


def test_without_the_all_reduce_the_same_comparison_fails(runs):
    """The test-only switch skips the gradient all-reduce (and the replica check): each rank steps on its own
    share's gradient, and rank 0's adapter is far from the one-process run's."""
    events = ddp(runs, "alone", _test_skip_allreduce=True)
    assert events[-1]["type"] == "completed", events[-1]
    difference = relative_difference(adapter(runs / "alone"), adapter(runs / "one"))
    assert difference > 1000 * TOLERANCE


def test_sigkill_then_resume_of_two_ranks_gives_the_same_bytes(runs):
    work = runs / "killed-launch"
    work.mkdir()
    (work / "request.json").write_text(json.dumps(request(runs, "killed", nproc=2, reward_class=REWARD)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "STATESET_DDP_DEVICE": "cpu", "TOY_REWARD_SLEEP": "0.2"}
    proc = subprocess.Popen(torchrun_command(2, str(work)), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = runs / "killed" / "checkpoints" / "step-000002" / "state.json"
    deadline = time.time() + 180
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "checkpoint 2 did not appear"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both ranks, at once
    proc.wait()
    assert not (runs / "killed" / "adapter").exists()
    events = ddp(runs, "killed", resume=True)
    assert events[-1]["type"] == "completed", events[-1]
    assert any("updates from step 2" in e.get("message", "") or "updates from step 3" in e.get("message", "")
               for e in events)
    same = lambda name: (runs / "two" / name).read_bytes() == (runs / "killed" / name).read_bytes()  # noqa: E731
    assert same("adapter/adapter_model.safetensors")
    digests = lambda run: [json.loads(x)["update_sha256"]  # noqa: E731
                           for x in (run / "receipts.jsonl").read_text().splitlines()]
    assert digests(runs / "two") == digests(runs / "killed")


def test_a_two_rank_checkpoint_resumes_only_on_two_ranks(runs):
    shutil.copytree(runs / "two", runs / "copy")
    events = list(train_run(request(runs, "copy", resume=True), reward=DigitReward()))
    assert events[-1]["type"] == "failed"
    assert "written by 2 process(es)" in events[-1]["message"] and "--nproc 2" in events[-1]["message"]


@pytest.mark.parametrize("change, message", [
    ({"algorithm": "dapo"}, "dapo does not run on several processes yet"),
    ({"algorithm": "ppo"}, "ppo does not run on several processes yet"),
    ({"config": {"batch_size": 3, "num_generations": 4, "device": "cpu"}}, "does not split into 2 equal shares"),
    ({"reward_class": None}, "each rank builds its own reward"),
])
def test_what_two_ranks_cannot_run_exactly_is_refused_before_anything_starts(tmp_path, change, message):
    req = {**request(tmp_path, "run", nproc=2, reward_class=REWARD), **change}
    started = time.time()
    events = list(train_run(req, reward=DigitReward()))
    assert events[-1]["type"] == "failed" and message in events[-1]["message"], events[-1]
    assert time.time() - started < 10 and not (tmp_path / "run").exists()


def test_train_remote_with_several_gpus_is_refused_before_any_quote(tmp_path):
    from stateset_agents.core.errors import InputError
    from stateset_agents.remote import session

    class NeverQuoted:
        def quote(self, _request):
            raise AssertionError("quoted")

    data = write_rows(tmp_path / "rows.jsonl", make_rows(4))
    config = {"provider": "local", "dataset": str(data), "gpus": 2, "max_cost_usd": 50.0, "algorithm": "sft",
              "reward": "gsm8k"}
    with pytest.raises(InputError, match="--gpus 2: provider local runs the trainer as one process.*nothing "
                                         "was quoted or rented") as caught:
        session.prepare(config, tmp_path / "ws", NeverQuoted())
    assert caught.value.field == "gpus" and not (tmp_path / "ws").exists()


def test_the_train_command_runs_two_ranks_and_refuses_what_they_cannot_run(tiny_model_dir, tmp_path, capsys):
    from stateset_agents.cli import main

    data = write_rows(tmp_path / "curated.jsonl", make_rows(4))
    config = tmp_path / "train.yaml"
    config.write_text("max_new_tokens: 8\nbatch_size: 2\nnum_generations: 2\ndevice: cpu\n")
    out = tmp_path / "run"
    argv = ["train", "--dataset", str(data), "--algorithm", "grpo", "--reward", "gsm8k", "--base-model",
            str(tiny_model_dir), "--output", str(out), "--steps", "1", "--config", str(config), "--nproc", "2"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "launched 2 processes with torchrun" in capsys.readouterr().err
    assert json.loads((out / "manifest.json").read_text())["committed_updates"] == 1
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["world_size"] == 2
    dapo = [a if a != "grpo" else "dapo" for a in argv] + ["--overwrite"]
    assert main(dapo) != 0
    assert "dapo does not run on several processes yet" in capsys.readouterr().err.replace("\n", " ")


def test_sft_on_two_ranks_weights_each_ranks_gradient_by_its_tokens(runs):
    """SFT's loss is a mean over the batch's tokens: with completions of different lengths on the two ranks, only
    a token-weighted sum of the ranks' gradients is the global batch's."""
    rows = make_rows(8)
    for i, row in enumerate(rows):
        row["completion"]["content"] = "the answer is " + "x" * (3 * i)
    write_rows(runs / "sft.jsonl", rows)

    def sft(out: str, **more) -> dict:
        req = {**request(runs, out, **more), "algorithm": "sft", "dataset": str(runs / "sft.jsonl"),
               "config": {"batch_size": 4, "learning_rate": 2e-2, "device": "cpu"}}
        return list(train_run(req, reward=DigitReward() if "nproc" not in more else None))[-1]

    assert sft("sft-one", _emulate_ranks=2)["type"] == "completed"
    assert sft("sft-two", nproc=2, reward_class=REWARD)["type"] == "completed"
    tokens = [json.loads(x) for x in (runs / "sft-two" / "receipts.jsonl").read_text().splitlines()]
    assert all(len(r["rank_batch_sha256"]) == 2 for r in tokens)
    assert relative_difference(adapter(runs / "sft-two"), adapter(runs / "sft-one")) <= TOLERANCE


def test_a_stop_request_reaches_every_rank_which_save_and_say_how_to_resume(runs, monkeypatch):
    import threading

    monkeypatch.setenv("TOY_REWARD_SLEEP", "0.2")  # the ranks inherit it: time to ask for the stop mid-run
    stop, events = threading.Event(), []
    req = request(runs, "stopped", nproc=2, reward_class=REWARD, steps=6)
    worker = threading.Thread(target=lambda: events.extend(train_run(req, stop=stop)))
    worker.start()
    marker = runs / "stopped" / "checkpoints" / "step-000001" / "state.json"
    deadline = time.time() + 180
    while not marker.exists() and worker.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    stop.set()  # what `train`'s SIGINT/SIGTERM handler does (trainer.cancel)
    worker.join(timeout=180)
    last = events[-1]
    assert last["type"] == "failed" and last["reason"] == "interrupted" and "--resume" in last["message"], last
    saved = sorted((runs / "stopped" / "checkpoints").glob("step-*"))[-1]
    assert int(saved.name.split("-")[1]) == last["step"] < 6
    assert json.loads((saved / "state.json").read_text())["world_size"] == 2
    assert json.loads((runs / "stopped" / "manifest.json").read_text())["status"] == "stopped"
