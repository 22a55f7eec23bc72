"""provider:modal and provider:river: fakes at each plugin's thin SDK module, plus checks of that module's calls
against the real SDKs' signatures (modal: autospecs of the installed SDK; river: its wheel's source, by AST)."""
from __future__ import annotations

import ast
import inspect
import os
import zipfile
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.remote import session
from stateset_agents.remote.cap import CapExceeded
from stateset_agents.core.runtimes import load_component
from tests.providers.fake_modal import fake_modal  # noqa: F401 - the fixture
from tests.providers.provider_helpers import IMAGE


def _modal_config(dataset, **over):
    return {"provider": "modal", "dataset": str(dataset), "gpu": "h100", "max_hours": 1, "max_cost_usd": 5.0,
            "image": IMAGE, "reward": "gsm8k", **over}


def test_modal_quotes_launches_once_and_terminates_at_the_deadline(fake_modal, dataset, tmp_path):
    with load_component("provider:modal") as provider:
        with pytest.raises(CapExceeded, match="H100 x1"):
            session.prepare(_modal_config(dataset, max_hours=2), tmp_path / "big", provider)
        with pytest.raises(InputError, match="--gpus 2: provider modal runs the trainer as one process"):
            session.prepare(_modal_config(dataset, gpus=2, max_cost_usd=100.0), tmp_path / "big", provider)
        with pytest.raises(InputError, match="not offered by modal; choose one of: A100-40GB, .*T4"):
            session.prepare(_modal_config(dataset, gpu="MI300X"), tmp_path / "x", provider)
        plan = session.prepare(_modal_config(dataset), tmp_path / "ws", provider)
        assert plan["quote"]["usd_per_gpu_hour"] == pytest.approx(3.95 + 0.40)
        first = session.launch(tmp_path / "ws", provider)
        again = session.launch(tmp_path / "ws", provider)
        assert len(fake_modal.spawns) == 1 and again["job"]["attached"]
        assert fake_modal.spawns[0]["timeout_s"] == 3600 and fake_modal.spawns[0]["gpu"] == "H100"
        assert fake_modal.spawns[0]["env"]["STATESET_RUN_ID"] == plan["run_id"]
        t = [float(first["job"]["created_at"])]
        fake_modal.runs[plan["run_id"]]["created_at"] = t[0]

        def sleep(s):
            t[0] += s
            fake_modal.runs[plan["run_id"]]["finished_at"] = t[0]

        fake_modal.runs[plan["run_id"]]["finished_at"] = t[0]
        done = session.watch(plan["run_id"], provider, clock=lambda: t[0], sleep=sleep, poll_s=60)
        # at the quoted rate the cap cannot be reached within max_hours, so the deadline stops it first
        assert done["phase"] == "failed" and "deadline" in done["error"] and fake_modal.cancels == [("fc-1", f"stateset-{plan['run_id']}")]
        assert done["spend_usd"] < 5.0


def test_modal_quotes_without_credentials_and_launch_names_the_variables(fake_modal, dataset, tmp_path, monkeypatch):
    monkeypatch.delenv("MODAL_TOKEN_ID")
    with load_component("provider:modal") as provider:
        plan = session.prepare(_modal_config(dataset), tmp_path / "ws", provider)  # the dated table needs no API
        assert plan["quote"]["usd_per_gpu_hour"] == pytest.approx(3.95 + 0.40) and "as of" in plan["quote"]["source"]
        with pytest.raises(InputError, match="MODAL_TOKEN_ID"):
            session.launch(tmp_path / "ws", provider)
    assert fake_modal.spawns == [] and fake_modal.runs == {}


def test_modal_sdk_calls_match_the_installed_sdk():
    modal = pytest.importorskip("modal")
    from stateset_plugins.providers import modal_sdk

    spec = lambda cls: mock.create_autospec(cls, instance=True)  # noqa: E731
    sdk = SimpleNamespace(App=mock.create_autospec(modal.App), Volume=mock.create_autospec(modal.Volume),
                          Dict=mock.create_autospec(modal.Dict), Image=mock.create_autospec(modal.Image),
                          FunctionCall=mock.create_autospec(modal.FunctionCall),
                          Workspace=mock.create_autospec(modal.Workspace), exception=modal.exception)
    sdk.App.return_value = spec(modal.App)
    sdk.App.return_value.function.return_value.return_value = spec(modal.Function)
    sdk.App.lookup.return_value = spec(modal.App)
    sdk.Dict.from_name.return_value = spec(modal.Dict)
    sdk.Dict.from_name.return_value.put.return_value = False
    sdk.Volume.from_name.return_value = spec(modal.Volume)
    sdk.Volume.from_name.return_value.read_file.return_value = iter([b"a", b"b"])
    sdk.FunctionCall.from_id.return_value = spec(modal.FunctionCall)
    sdk.FunctionCall.from_id.return_value.get.side_effect = TimeoutError
    from modal.workspace import WorkspaceBillingManager

    sdk.Workspace.from_context.return_value = SimpleNamespace(billing=spec(WorkspaceBillingManager))
    sdk.Workspace.from_context.return_value.billing.report.return_value = []
    # every call below is checked by the autospecs against the installed modal's signatures
    modal_sdk.claim("sa-x", {"state": "creating"}, sdk=sdk)
    modal_sdk.record("sa-x", {}, sdk=sdk)
    modal_sdk.lookup("sa-x", sdk=sdk)
    modal_sdk.spawn("sa-x", app_name="stateset-sa-x", image_ref=IMAGE, gpu="H100:2", timeout_s=60, volume="v",
                    env={"A": "1"}, bundle_b64="", bundle_sha256="", sdk=sdk)
    assert modal_sdk.call_state("fc", sdk=sdk) == ("running", None)
    modal_sdk.cancel("fc", "stateset-sa-x", sdk=sdk)
    assert modal_sdk.read_file("v", "job/receipt.json", sdk=sdk) == b"ab"
    assert modal_sdk.reported_cost("sa-x", 7200.0, sdk=sdk) is None
    # chat-remote: the adapter onto the volume, the chat function deployed, one turn, the app stopped
    sdk.Function = mock.create_autospec(modal.Function)
    sdk.Function.from_name.return_value = spec(modal.Function)
    sdk.Function.from_name.return_value.remote.return_value = {"type": "completed"}
    adapter = Path(__file__)
    modal_sdk.upload_files("v", str(adapter.parent), [{"path": adapter.name}], "chat/model", b"{}", sdk=sdk)
    modal_sdk.deploy_chat("sa-x-chat", run_id="sa-x", app_name="stateset-sa-x-chat", image_ref=IMAGE, gpu="H100",
                          timeout_s=600, idle_s=60, volume="v", env={"A": "1"}, sdk=sdk)
    assert modal_sdk.chat_call("stateset-sa-x-chat", {"messages": []}, sdk=sdk) == {"type": "completed"}
    modal_sdk.stop_app("stateset-sa-x-chat", sdk=sdk)
    sdk.Function.from_name.assert_called_with("stateset-sa-x-chat", "chat")
    assert issubclass(modal.exception.InputCancellation, BaseException)


# ------------------------------------------------------------------------------------------------------- river


def test_river_refuses_a_cap_it_cannot_price_and_prices_from_a_dated_table(monkeypatch, tmp_path):
    from stateset_plugins.providers.river.provider import RiverProvider

    from stateset_agents.remote.cap import enforce_cap

    monkeypatch.delenv("RIVER_API_KEY", raising=False)  # a quote needs no key (`--plan-only`); a launch does

    quote = RiverProvider().quote({"base_model": "Qwen/Qwen3-8B", "max_hours": 2, "training": {"steps": 10}})
    with pytest.raises(CapExceeded, match="cannot price this job.*no dated River price"):
        enforce_cap(quote, 1, 2, 100.0)
    table = {"as_of": "2026-01-01", "models": {"Qwen/Qwen3-8B": {"train_per_mtok": 1.0, "sample_per_mtok": 0.5}}}
    quote = RiverProvider({"price_table": table}).quote({"base_model": "Qwen/Qwen3-8B", "max_hours": 2,
                                                          "training": {"steps": 10}})
    # 10 steps x 4 prompts x 8 generations x (512 + 64) tokens: scored 3 times (forward, forward-backward, KL
    # reference) at the training price and sampled once
    assert enforce_cap(quote, 1, 2, 100.0) == pytest.approx((10 * 32 * 576 * 3 * 1.0 + 10 * 32 * 576 * 0.5) / 1e6)
    with pytest.raises(InputError, match="RIVER_API_KEY is not set"):
        RiverProvider().launch({})


def _river_signatures(wheel: Path) -> dict[str, inspect.Signature]:
    """Class.method -> a Signature built from the wheel's source (no import: the client needs Python 3.12+)."""
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for name in ("river_client/client.py", "river_client/types.py"):
            for node in ast.walk(ast.parse(z.read(name))):
                if not isinstance(node, ast.ClassDef):
                    continue
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef):
                        args = fn.args
                        params = [inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                  for a in args.posonlyargs + args.args][1:]
                        defaults = len(args.defaults)
                        params = [p.replace(default=None) if i >= len(params) - defaults else p
                                  for i, p in enumerate(params)]
                        if args.vararg:
                            params.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
                        for a, d in zip(args.kwonlyargs, args.kw_defaults):
                            params.append(inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY,
                                                            default=inspect.Parameter.empty if d is None else None))
                        if args.kwarg:
                            params.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
                        out[f"{node.name}.{fn.name}"] = inspect.Signature(params)
                if node.name == "LoraConfig":  # a dataclass: its fields are its parameters
                    out["LoraConfig.__init__"] = inspect.Signature(
                        [inspect.Parameter(s.target.id, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
                         for s in node.body if isinstance(s, ast.AnnAssign)])
    return out


class Recorder:
    """Records each call as (Class.method, args, kwargs); returns another recorder of the declared class, or a value
    shaped like the declared result type (from river_client/types.py)."""

    RETURNS = {"Client.session": "SessionContext", "SessionContext.__enter__": "Session",
               "Session.create_model": "Model"}
    VALUES = {"Model.sample": [[SimpleNamespace(tokens=[1, 2], logprobs=[-0.1, -0.2], stop_reason="stop",
                                                prompt_tokens=3)]],
              "Session.sample": [[SimpleNamespace(tokens=[1], logprobs=[-0.1], stop_reason="eos", prompt_tokens=3)]],
              "Model.forward": SimpleNamespace(metrics={"num_tokens": 4.0}, logprobs=[[-0.5, -0.25, 0.0]]),
              "Model.forward_backward": SimpleNamespace(metrics={"loss": 1.0}, logprobs=None),
              "Model.optim_step": SimpleNamespace(metrics={"grad_norm": 0.5}, policy_version=None),
              "Model.save_weights": SimpleNamespace(path="river://run/weights/x", step=1,
                                                    checkpoint_type="training")}

    def __init__(self, cls, log):
        self._cls, self._log = cls, log

    def __getattr__(self, name):
        def call(*args, **kwargs):
            key = f"{self._cls}.{name}"
            self._log.append((key, args, kwargs))
            return self.VALUES[key] if key in self.VALUES else Recorder(self.RETURNS.get(key, "?"), self._log)
        return call


def test_river_sdk_calls_match_the_client_wheel():
    wheel_dir = Path(os.environ.get("STATESET_RIVER_WHEEL_DIR", Path(__file__).resolve().parents[2] / ".venv" /
                                    "river-wheel"))
    wheels = sorted(wheel_dir.glob("river_client-*.whl")) if wheel_dir.is_dir() else []
    if not wheels:
        pytest.skip(f"no river-client wheel in {wheel_dir} (pip download --no-deps --python-version 3.12 "
                    "--only-binary=:all: river-client -d DIR)")
    from stateset_plugins.providers.river import sdk as river_sdk

    sigs = _river_signatures(wheels[-1])
    log: list = []
    sdk = SimpleNamespace(Client=lambda **kw: (log.append(("Client.__init__", (), kw)), Recorder("Client", log))[1],
                          LoraConfig=lambda **kw: log.append(("LoraConfig.__init__", (), kw)))
    sdk.Client = lambda **kw: (log.append(("Client.__init__", (), kw)), Recorder("Client", log))[1]
    client = river_sdk.connect("key", "api.river.ai", sdk=sdk)
    river_sdk.health(client)
    context, sess = river_sdk.open_session(client, "sa-x")
    model = river_sdk.create_model(sess, "Qwen/Qwen3-8B", 16, seed=0, sdk=sdk)
    assert river_sdk.sample(model, [[1, 2, 3]], num_samples=1, max_tokens=8, temperature=1.0, seed=0) == (
        [[{"tokens": [1, 2], "logprobs": [-0.1, -0.2], "stop_reason": "stop"}]], {"sample_tokens": 5})
    river_sdk.sample_base(sess, "Qwen/Qwen3-8B", [[1, 2, 3]], max_tokens=8, temperature=0.0, seed=0)
    # chat-remote samples the run's checkpoint (billed: the sampled tokens and the prompt's)
    assert river_sdk.sample_checkpoint(sess, "Qwen/Qwen3-8B", "river://run/weights/x", [[1, 2, 3, 4]], max_tokens=8,
                                       temperature=0.7, seed=0)[1] == {"sample_tokens": 1 + 3}
    assert river_sdk.forward(model, [{"input_ids": [1, 2, 3]}]) == ([[-0.5, -0.25, 0.0]], {"train_tokens": 4})
    # no token count in the metrics: what was sent is what is billed
    assert river_sdk.forward_backward(model, [{"input_ids": [1, 2, 3]}], "importance_sampling")[1] == {
        "train_tokens": 3}
    assert river_sdk.optim_step(model, 1e-4, 1.0, 0.0, "step-1") == {"grad_norm": 0.5}
    assert river_sdk.save(model, "step-1", mode="inference") == "river://run/weights/x"
    river_sdk.load(model, "river://run/weights/x")
    river_sdk.close_session(context)
    river_sdk.close(client)
    called = {key for key, _, _ in log}
    # every function of the thin module that reaches river_client was exercised (download is plain HTTPS)
    assert called >= {"Client.__init__", "Client.health_check", "Client.session", "SessionContext.__enter__",
                      "SessionContext.__exit__", "Session.create_model", "LoraConfig.__init__", "Model.sample",
                      "Session.sample", "Model.forward", "Model.forward_backward", "Model.optim_step",
                      "Model.save_weights", "Model.load_weights", "Client.close"}
    for key, args, kwargs in log:
        assert key in sigs, f"river_client has no {key}"
        sigs[key].bind(*args, **kwargs)  # raises TypeError on a parameter the real client does not take
