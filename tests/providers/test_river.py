"""provider:river and the engine's River backend against an in-memory River service (fake_river) at the thin SDK
module: GRPO through RiverBackend really updates the adapter; a launch is priced from River's reported usage, runs
under the cap and the watchdog, attaches on retry, and comes back with checksummed artifacts."""
from __future__ import annotations

import json
import threading
import time

import pytest

from stateset_agents.remote import session, state, worker
from stateset_agents.remote.cap import CapExceeded

pytest.importorskip("torch")
pytest.importorskip("peft")
from tests.providers.fake_river import FakeRiver  # noqa: E402

PRICES = {"train_per_mtok": 1.0, "sample_per_mtok": 1.0}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from tests.helpers.toy_rewards import build_tiny_model

    path = tmp_path_factory.mktemp("tiny")
    build_tiny_model(path)
    return path


@pytest.fixture()
def fake_river(tiny_model, monkeypatch):
    import torch

    torch.set_num_threads(1)
    return FakeRiver(tiny_model).install(monkeypatch)


def test_grpo_through_the_river_backend_updates_the_adapter(fake_river, tiny_model, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from stateset_plugins.trainers.api import GRPOTrainer
    from tests.helpers.toy_rewards import DigitReward, make_rows, write_rows

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    usage = tmp_path / "usage.json"
    trainer = GRPOTrainer(None, tokenizer, reward=DigitReward(), dataset=write_rows(tmp_path / "d.jsonl", make_rows()),
                          config={"steps": 3, "batch_size": 2, "num_generations": 4, "max_new_tokens": 6,
                                  "learning_rate": 0.05, "save_every": 2},
                          output_dir=tmp_path / "run",
                          eval_prompts=[{"id": "c1", "prompt": [{"role": "user", "content": "count to 3"}], "tools": [],
                                         "metadata": {}}],
                          base_model_info={"source": "local", "path": str(tiny_model)},
                          backend={"kind": "river", "run_id": "sa-test", "base_model": str(tiny_model),
                                   "usage_path": str(usage)})
    try:
        summary = trainer.train()
    finally:
        trainer.backend.close()
    assert summary["step"] == 3 and fake_river.steps == 3
    assert [s["open"] for s in fake_river.sessions] == [False] and fake_river.sessions[0]["models"] == 2  # + KL ref
    weights = load_file(str(tmp_path / "run" / "adapter" / "adapter_model.safetensors"))
    lora_b = [t for k, t in weights.items() if "lora_B" in k]
    assert lora_b and any(float(t.abs().max()) > 0 for t in lora_b)  # zero at init: the updates reached River
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(m["grad_norm"] > 0 for m in metrics)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["status"] == "completed"
    assert (tmp_path / "run" / "eval_results.json").exists()
    assert json.loads(usage.read_text())["train_tokens"] == fake_river.usage["train_tokens"] > 0
    # a River checkpoint holds the whole learner state (River's optimizer checkpoint, the step the schedule follows)
    from stateset_agents.plugin_api.checkpoints import checkpoint_table

    table = checkpoint_table(tmp_path / "run")
    assert [row["step"] for row in table] == [2, 3] and all(row["complete"] for row in table), table


def test_the_surrogate_gives_the_local_backends_gradient(fake_river, tiny_model):
    """River's importance_sampling with advantages -dloss/dlogp and ratio 1 reproduces the objective's gradient."""
    import torch
    from transformers import AutoTokenizer

    from stateset_plugins.models.batch import Sample, collate

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    from stateset_plugins.trainers.objectives import get_objective
    from stateset_plugins.providers.river.backend import RiverBackend

    cfg = get_objective("grpo").Config(beta=0.0, lora_r=4)
    backend = RiverBackend(tokenizer, cfg, base_model=str(tiny_model), run_id="sa-grad")
    samples = [Sample(f"s{i}", "g", [5, 6, 7][: 2 + i], [8, 9, 10][: 3 - i], [True] * (3 - i), [-1.0] * (3 - i))
               for i in range(2)]
    batch = collate(samples, backend.pad_id, 2)
    weights = torch.tensor([[1.0, -2.0, 0.5], [3.0, 1.0, 0.0]])

    def loss_fn(new_logp, b):
        return (weights * new_logp * b.completion_mask).sum(), {}

    backend.forward_backward(batch, loss_fn, temperature=1.0)
    river_grads = [p.grad.clone() for p in backend.model.net.parameters() if p.requires_grad]
    net = backend.model.net
    net.zero_grad()
    for i, s in enumerate(samples):
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        logits = net(ids).logits[0, :-1].float()
        lp = logits.gather(-1, ids[0, 1:, None]).squeeze(-1) - torch.logsumexp(logits, -1)
        (weights[i, :len(s.completion_ids)] * lp[len(s.prompt_ids) - 1:]).sum().backward()
    local = [p.grad for p in net.parameters() if p.requires_grad]
    for a, b in zip(river_grads, local):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    backend.close()


class InProcessRiver:
    """provider:river with its worker in a thread of this process (the worker itself needs the river image)."""

    @staticmethod
    def make(config):
        from stateset_plugins.providers.river.provider import RiverProvider

        class Provider(RiverProvider):
            threads: dict = {}

            def _start_worker(self, job, env):
                t = threading.Thread(target=worker.run_job, args=(job,), daemon=True)
                self.threads[job.name] = t
                t.start()

            def _kill_worker(self, run_id, pid):
                raise AssertionError("the trainer should have stopped and closed its session by itself")

        return Provider(config)


def _config(dataset, tiny_model, prompts, cap, steps=2):
    return {"provider": "river", "dataset": str(dataset), "eval_prompts": str(prompts), "base_model": str(tiny_model),
            "algorithm": "grpo", "reward": "gsm8k", "max_hours": 1, "max_cost_usd": cap,
            "training": {"steps": steps, "batch_size": 2, "num_generations": 2, "max_new_tokens": 4,
                         "max_prompt_tokens": 64, "save_every": 1},
            "provider_config": {"price_table": {"as_of": "2026-01-01", "models": {str(tiny_model): PRICES}}}}


def _inputs(tmp_path):
    from tests.helpers.toy_rewards import make_rows, write_rows

    prompts = tmp_path / "held_out.txt"
    prompts.write_text("what is 7 + 8\n")
    return write_rows(tmp_path / "curated.jsonl", make_rows()), prompts


def test_river_launch_attaches_on_retry_and_books_the_usage_river_reported(fake_river, tiny_model, tmp_path):
    from stateset_plugins.providers.river.provider import usage_cost

    data, prompts = _inputs(tmp_path)
    config = _config(data, tiny_model, prompts, cap=1.0)
    provider = InProcessRiver.make(config["provider_config"])
    plan = session.prepare(config, tmp_path / "ws", provider)
    out = tmp_path / "runs" / "r"
    first = session.launch(tmp_path / "ws", provider, output=out)
    again = session.launch(tmp_path / "ws", provider, output=out)
    assert not first["job"]["attached"] and again["job"]["attached"]
    done = session.watch(plan["run_id"], provider, sleep=lambda s: time.sleep(0.05), poll_s=60)
    assert done["phase"] == "collected", done.get("error")
    assert len(fake_river.sessions) == 1 and not fake_river.sessions[0]["open"]  # one session, and it ended
    assert fake_river.sessions[0]["run_id"] == plan["run_id"] and fake_river.steps == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and (out / "eval_results.json").exists()
    assert (out / "adapter" / "adapter_model.safetensors").exists()
    receipt = json.loads((out / "remote_receipt.json").read_text())
    assert {f["path"] for f in receipt["files"]} >= {"adapter/adapter_model.safetensors", "manifest.json"}
    billed = usage_cost(fake_river.usage, PRICES)
    [line] = state.read_ledger()
    assert line["provider"] == "river" and line["spend_usd"] == pytest.approx(billed, abs=1e-6) and billed > 0


def test_river_cap_refusal_creates_no_session(fake_river, tiny_model, tmp_path):
    data, prompts = _inputs(tmp_path)
    config = _config(data, tiny_model, prompts, cap=0.001)
    provider = InProcessRiver.make(config["provider_config"])
    with pytest.raises(CapExceeded, match="worst case is above"):
        session.prepare(config, tmp_path / "ws", provider)
    assert fake_river.sessions == [] and not (tmp_path / "ws").exists()
    assert not (state.state_dir() / "river").exists()


def test_watchdog_ends_the_river_session_before_the_cap(tiny_model, tmp_path, monkeypatch):
    from stateset_plugins.providers.river.provider import token_budget, usage_cost

    fake = FakeRiver(tiny_model, usage_scale=4).install(monkeypatch)  # River bills far more than the budget said
    data, prompts = _inputs(tmp_path)
    config = _config(data, tiny_model, prompts, cap=1.0, steps=8)
    worst = usage_cost(token_budget(config["training"]), PRICES)
    config["max_cost_usd"] = cap = round(worst * 1.01, 6)
    provider = InProcessRiver.make(config["provider_config"])
    plan = session.prepare(config, tmp_path / "ws", provider)
    job = provider.root / plan["run_id"]
    permits = threading.Semaphore(0)

    def gate():  # one optimizer step per watchdog poll; a stop request lets the current step finish
        while not permits.acquire(timeout=0.02):
            if (job / "stop").exists():
                return

    fake.gate = gate
    session.launch(tmp_path / "ws", provider)
    released = [0]

    def sleep(_s):
        released[0] += 1
        permits.release()
        for _ in range(2000):
            if fake.steps >= released[0] or not provider.threads[plan["run_id"]].is_alive():
                return
            time.sleep(0.01)

    done = session.watch(plan["run_id"], provider, sleep=sleep, poll_s=60)
    provider.threads[plan["run_id"]].join(30)
    assert done["phase"] == "capped" and fake.steps < 8
    assert [s["open"] for s in fake.sessions] == [False]  # the trainer stopped and closed its River session
    billed = usage_cost(fake.usage, PRICES)
    [line] = state.read_ledger()
    assert line["outcome"] == "capped" and billed <= line["spend_usd"] < cap
