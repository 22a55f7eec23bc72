"""`chat-remote` on runpod, modal and river, through the CLI with scripted stdin: real replies from the tiny model
through each provider's fake (RunPod: the real SDK against the GraphQL fake, the pod a real local process; Modal and
River: fakes at their thin SDK modules), refusal above the cap before anything is created, the watchdog ending the
session before the cap, the resource terminated on exit, and the session booked in the ledger (kind chat)."""
from __future__ import annotations

import sys

import pytest

from stateset_agents.cli import main
from stateset_agents.core.jsonio import sha256_file, write_json
from stateset_agents.remote import state
from tests.providers.fake_modal import fake_modal  # noqa: F401 - the fixture
from tests.providers.provider_helpers import IMAGE

pytest.importorskip("torch")
pytest.importorskip("peft")

from tests.providers.fake_river import FakeRiver  # noqa: E402

RUN_ID = "sa-" + "c" * 20
SESSION_ID = f"{RUN_ID}-chat"
PRICES = {"train_per_mtok": 1.0, "sample_per_mtok": 1.0}
FAST = ["--max-new-tokens", "4", "--poll-seconds", "0.2"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from stateset_plugins.models.tiny import build_tiny_model

    path = tmp_path_factory.mktemp("tiny")
    build_tiny_model(path)
    return path


class ScriptedStdin:
    """stdin that is not a terminal: lines, with callables run between them (as time passing would)."""

    def __init__(self, *steps):
        self.steps = steps

    def isatty(self):
        return False

    def __iter__(self):
        for step in self.steps:
            if callable(step):
                step()
            else:
                yield step + "\n"


def _collected(tmp_path, tiny_model, provider, *, adapter_files=None, extra=None, provider_config=None):
    """A run as `train-remote` leaves it: record (phase collected), workspace plan, run dir with adapter/ and
    manifest.json."""
    run_dir = tmp_path / "runs" / "r1"
    adapter = run_dir / "adapter"
    if adapter_files is None:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        net = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                             LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
        net.save_pretrained(adapter)
    else:
        adapter.mkdir(parents=True)
        for name, data in adapter_files.items():
            (adapter / name).write_bytes(data)
    for name, obj in (extra or {}).items():
        write_json(adapter / name, obj)
    write_json(run_dir / "manifest.json", {"run_id": RUN_ID, "base_model": {"source": "local", "path": str(tiny_model)},
                                           "adapter": {"sha256": sha256_file(adapter / "adapter_model.safetensors")}})
    workspace = tmp_path / "ws"
    write_json(workspace / "plan.json", {"run_id": RUN_ID, "gpu": {"id": "NVIDIA H100 80GB HBM3" if provider ==
                                                                   "runpod" else "H100", "count": 1},
                                         "image": {"name": IMAGE.split("@")[0], "digest": IMAGE.split("@")[1],
                                                   "ref": IMAGE}})
    state.save_record({"run_id": RUN_ID, "provider": provider, "provider_config": provider_config or {},
                       "output": str(run_dir), "workspace": str(workspace), "phase": "collected",
                       "max_cost_usd": 10.0})
    return run_dir


def _chat(monkeypatch, provider, cap, *steps, extra=()):
    monkeypatch.setattr(sys, "stdin", ScriptedStdin(*steps))
    return main(["chat-remote", "--provider", provider, "--run", RUN_ID, "--max-cost", str(cap), "--max-minutes",
                 "10", *FAST, *extra])


def _chats():
    return [r for r in state.read_ledger() if r["kind"] == "chat"]


# ------------------------------------------------------------------------------------------------------- runpod


@pytest.fixture()
def runpod(fake_runpod, monkeypatch):
    fake_runpod.run_pods = True
    monkeypatch.setenv("STATESET_RUNPOD_PROXY_URL", f"{fake_runpod.api_url}/proxy/{{pod_id}}-{{port}}")
    return fake_runpod


def test_runpod_chat_session_replies_and_terminates_the_pod_on_exit(runpod, tiny_model, tmp_path, monkeypatch,
                                                                    capsys):
    _collected(tmp_path, tiny_model, "runpod")

    def time_passes():  # RunPod bills the pod's uptime
        runpod.pods["pod001"]["uptimeSeconds"] = 2

    assert _chat(monkeypatch, "runpod", 1.0, "hello there", time_passes, "what is 2 + 3", "/quit") == 0
    assert capsys.readouterr().out.count("assistant> ") == 2
    assert runpod.creates == 1 and runpod.terminated == ["pod001"]  # terminated, never merely stopped
    proc, _ = runpod.processes["pod001"]
    assert proc.poll() is not None  # the "pod" process is gone with it
    [line] = _chats()
    assert line["run_id"] == RUN_ID and line["session_id"] == SESSION_ID and line["outcome"] == "chatted"
    assert line["spend_usd"] == pytest.approx(2.99 * 2 / 3600, abs=1e-6) and line["turns"] == 2
    assert state.load_record(SESSION_ID)["phase"] == "closed"


def test_runpod_chat_refuses_above_the_cap_and_creates_nothing(runpod, tiny_model, tmp_path, monkeypatch, capsys):
    _collected(tmp_path, tiny_model, "runpod")
    # 2.99 USD/h for 10 minutes is about 0.50 USD
    assert _chat(monkeypatch, "runpod", 0.4, "hello", "/quit") == 4
    assert "worst case is above --max-cost" in capsys.readouterr().err
    assert runpod.creates == 0 and _chats() == [] and state.load_record(SESSION_ID) is None


def test_runpod_watchdog_ends_the_session_before_the_cap(runpod, tiny_model, tmp_path, monkeypatch, capsys):
    _collected(tmp_path, tiny_model, "runpod")

    def billing_runs_ahead():  # the pod bills far longer than the clock says (a price change, a slow start...)
        runpod.pods["pod001"]["uptimeSeconds"] = 1100  # 0.914 USD at 2.99 USD/h, against a 1 USD cap

    assert _chat(monkeypatch, "runpod", 1.0, "hello", billing_runs_ahead, "again", "/quit") == 4
    captured = capsys.readouterr()
    assert captured.out.count("assistant> ") == 1 and "ended before the --max-cost cap" in captured.err
    assert runpod.terminated == ["pod001"]
    [line] = _chats()
    assert line["outcome"] == "capped" and 0.9 < line["spend_usd"] < 1.0


# -------------------------------------------------------------------------------------------------------- modal


def test_modal_chat_session_replies_and_stops_the_app_on_exit(fake_modal, tiny_model, tmp_path, monkeypatch,
                                                              capsys):
    _collected(tmp_path, tiny_model, "modal")
    assert _chat(monkeypatch, "modal", 1.0, "hello there", "/reset", "what is 2 + 3", "/quit") == 0
    assert capsys.readouterr().out.count("assistant> ") == 2
    [deploy] = fake_modal.deploys
    assert deploy["app_name"] == f"stateset-{SESSION_ID}" and deploy["gpu"] == "H100"
    assert deploy["volume"] == f"stateset-{RUN_ID}" and deploy["image_ref"] == IMAGE
    assert deploy["timeout_s"] == 600 and float(deploy["env"]["STATESET_DEADLINE_AT"]) == fake_modal.expiries[0]
    assert fake_modal.stopped == [f"stateset-{SESSION_ID}"] and fake_modal.runs[SESSION_ID]["state"] == "terminated"
    assert [len(c["messages"]) for c in fake_modal.chat_calls] == [1, 1]
    [line] = _chats()
    assert line["outcome"] == "chatted" and line["provider"] == "modal" and 0 <= line["spend_usd"] < 0.01


def test_modal_chat_refuses_above_the_cap_and_deploys_nothing(fake_modal, tiny_model, tmp_path, monkeypatch,
                                                              capsys):
    _collected(tmp_path, tiny_model, "modal")
    assert _chat(monkeypatch, "modal", 0.5, "hello", "/quit") == 4  # (3.95 + 0.40) USD/h x 10 min = 0.725
    assert "worst case is above --max-cost" in capsys.readouterr().err
    assert fake_modal.deploys == [] and fake_modal.runs == {} and _chats() == []


def test_modal_watchdog_ends_the_session_before_the_cap(fake_modal, tiny_model, tmp_path, monkeypatch, capsys):
    _collected(tmp_path, tiny_model, "modal")

    def time_passes():  # 740 s at 4.35 USD/h is 0.894 USD: a minute more (the termination) would near the cap
        fake_modal.runs[SESSION_ID]["created_at"] -= 740

    assert _chat(monkeypatch, "modal", 1.0, "hello", time_passes, "again", "/quit") == 4
    assert "ended before the --max-cost cap" in capsys.readouterr().err
    assert fake_modal.stopped == [f"stateset-{SESSION_ID}"] and len(fake_modal.chat_calls) == 1
    [line] = _chats()
    assert line["outcome"] == "capped" and 0.9 < line["spend_usd"] < 1.0


def test_modal_ctrl_c_stops_the_app_and_books_the_session(fake_modal, tiny_model, tmp_path, monkeypatch, capsys):
    _collected(tmp_path, tiny_model, "modal")

    def ctrl_c():
        raise KeyboardInterrupt

    assert _chat(monkeypatch, "modal", 1.0, "hello", ctrl_c, "never sent") == 130
    assert fake_modal.stopped == [f"stateset-{SESSION_ID}"] and len(fake_modal.chat_calls) == 1
    assert _chats()[0]["outcome"] == "interrupted"
    # a second session of the same run takes the closed one's key over and deploys again
    assert _chat(monkeypatch, "modal", 1.0, "hello", "/quit") == 0
    assert len(fake_modal.deploys) == 2 and [r["outcome"] for r in _chats()] == ["interrupted", "chatted"]


def test_a_crashed_sessions_leftover_is_terminated_and_booked_first(fake_modal, tiny_model, tmp_path, monkeypatch):
    import time

    _collected(tmp_path, tiny_model, "modal")
    now = time.time()
    fake_modal.runs[SESSION_ID] = {"kind": "chat", "state": "deployed", "created_at": now - 360,
                                   "deadline_at": now + 240, "rate": 4.35, "run_id": RUN_ID}
    state.save_record({"run_id": SESSION_ID, "kind": "chat", "provider": "modal", "phase": "open",
                       "max_cost_usd": 1.0})
    assert [j["run_id"] for j in session_orphans()] == []  # its record says it is open: not an orphan yet
    assert _chat(monkeypatch, "modal", 1.0, "hello", "/quit") == 0
    left, now_ = _chats()
    assert left["outcome"] == "abandoned" and left["spend_usd"] == pytest.approx(4.35 / 10, abs=0.01)
    assert now_["outcome"] == "chatted" and fake_modal.stopped == [f"stateset-{SESSION_ID}"] * 2


def session_orphans():
    from stateset_agents.remote import session
    from stateset_agents.core.runtimes import load_component

    with load_component("provider:modal") as provider:
        return session.orphans({"modal": provider})


def test_modal_chat_refuses_a_tampered_adapter_on_the_volume(fake_modal, tiny_model, tmp_path, monkeypatch, capsys):
    _collected(tmp_path, tiny_model, "modal")
    real = fake_modal.upload_files

    def tampered(volume, local_dir, files, remote_dir, listing, sdk=None):
        real(volume, local_dir, files, remote_dir, listing)
        (fake_modal.volumes / volume / remote_dir / "adapter" / "adapter_model.safetensors").write_bytes(b"x")

    from stateset_plugins.providers import modal_sdk

    monkeypatch.setattr(modal_sdk, "upload_files", tampered)
    assert _chat(monkeypatch, "modal", 1.0, "hello", "/quit") == 1
    assert "does not match its sha256" in capsys.readouterr().err
    assert fake_modal.stopped == [f"stateset-{SESSION_ID}"] and _chats()[0]["outcome"] == "failed"


# -------------------------------------------------------------------------------------------------------- river


def _river_in_process(monkeypatch):
    """provider:river in this process: its client (and so the registry's availability check) needs Python 3.12+,
    and the fake stands in for river_sdk anyway."""
    from stateset_agents.remote import session
    from stateset_plugins.providers.river.provider import RiverProvider

    real = session.open_provider
    monkeypatch.setattr(session, "open_provider", lambda name, config=None: RiverProvider(dict(config or {}))
                        if name == "river" else real(name, config))


@pytest.fixture()
def river(tiny_model, monkeypatch):
    import torch

    torch.set_num_threads(1)
    _river_in_process(monkeypatch)
    return FakeRiver(tiny_model).install(monkeypatch)


def _river_run(river, tiny_model, tmp_path):
    """A River-trained run: its adapter is an inference checkpoint River holds (and the files downloaded)."""
    client = river.connect("river-test-key", "api.river.ai")
    context, session = river.open_session(client, RUN_ID)
    path = river.save(river.create_model(session, str(tiny_model), 4, seed=0), "adapter-000001", mode="inference")
    river.close_session(context)
    river.sessions.clear()
    files = river.checkpoints[path]["files"]
    _collected(tmp_path, tiny_model, "river", adapter_files=files,
               extra={"river_checkpoint.json": {"path": path, "base_model": str(tiny_model), "run_id": RUN_ID}},
               provider_config={"price_table": {"as_of": "2026-01-01", "models": {str(tiny_model): PRICES}}})
    return path


def test_river_chat_samples_the_runs_checkpoint_and_books_the_tokens(river, tiny_model, tmp_path, monkeypatch,
                                                                     capsys):
    _river_run(river, tiny_model, tmp_path)
    assert _chat(monkeypatch, "river", 0.5, "hello there", "what is 2 + 3", "/quit") == 0
    assert capsys.readouterr().out.count("assistant> ") == 2
    assert [(s["run_id"], s["open"]) for s in river.sessions] == [(SESSION_ID, False)]  # closed on exit
    [line] = _chats()
    assert line["outcome"] == "chatted" and line["spend_usd"] == pytest.approx(
        river.usage["sample_tokens"] * PRICES["sample_per_mtok"] / 1e6, abs=1e-6) and line["spend_usd"] > 0


def test_river_chat_refuses_above_the_cap_and_opens_no_session(river, tiny_model, tmp_path, monkeypatch, capsys):
    _river_run(river, tiny_model, tmp_path)
    # 50 turns x (2048 prompt + 4 new tokens) at 1 USD per million = 0.1026 USD
    assert _chat(monkeypatch, "river", 0.1, "hello", "/quit") == 4
    assert "worst case is above --max-cost" in capsys.readouterr().err
    assert river.sessions == [] and _chats() == []


def test_river_chat_needs_a_river_trained_run(river, tiny_model, tmp_path, monkeypatch, capsys):
    _collected(tmp_path, tiny_model, "river")
    assert _chat(monkeypatch, "river", 1.0, "hello", "/quit") == 2
    assert "not trained on River" in capsys.readouterr().err and river.sessions == []


def test_river_watchdog_ends_the_session_before_the_cap(tiny_model, tmp_path, monkeypatch, capsys):
    import torch

    torch.set_num_threads(1)
    _river_in_process(monkeypatch)
    river = FakeRiver(tiny_model, usage_scale=2000).install(monkeypatch)  # River bills far more than quoted
    _river_run(river, tiny_model, tmp_path)
    assert _chat(monkeypatch, "river", 0.5, "hello", "again", "/quit") == 4
    assert "ended before the --max-cost cap" in capsys.readouterr().err
    assert [s["open"] for s in river.sessions] == [False]
    [line] = _chats()
    assert line["outcome"] == "capped" and line["turns"] == 1 and line["spend_usd"] < 0.5
