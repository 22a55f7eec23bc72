"""Secrets: with a canary in every provider credential variable, a whole local loop (ingest, improve, train, evaluate,
deploy, report, a gateway key, a remote launch on the Modal fake, a failed RunPod call) leaves none of them, nor
any plugin launch token, in any file it wrote (run dirs, manifests, ledgers, reports, the state dir, logs) or in
what it printed; and the gateway's capture redacts personal data unless told not to."""
from __future__ import annotations

import json
import logging
import secrets
from pathlib import Path

import pytest

from stateset_agents.cli import main
from stateset_agents.core.runtimes import launcher
from tests.providers.fake_modal import fake_modal  # noqa: F401 - the fixture

SAMPLES = Path(__file__).resolve().parents[2] / "kernel" / "stateset_agents" / "samples"
IMAGE = "ghcr.io/stateset/trainer@sha256:" + "ab" * 32
CREDENTIALS = ("RUNPOD_API_KEY", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "RIVER_API_KEY", "OPENAI_API_KEY",
               "ANTHROPIC_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY")


class _RecordingSecrets:
    """The launcher's `secrets`, recording every plugin token it mints (so the test can look for them)."""

    def __init__(self):
        self.minted: list[str] = []

    def token_urlsafe(self, n=None):
        token = secrets.token_urlsafe(n)
        self.minted.append(token)
        return token


def _leaks(root: Path, needles: dict[str, str]) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{what} in {path.relative_to(root)}" for what, needle in needles.items()
                      if needle.encode() in data]
    return found


def test_no_credential_or_plugin_token_reaches_any_artifact_or_output(  # noqa: F811 - fake_modal, the fixture
        fake_modal, tiny_model_dir, tmp_path, monkeypatch, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    canaries = {name: f"CANARY{i}x{name.lower()}x7f3a9c" for i, name in enumerate(CREDENTIALS)}
    for name, value in canaries.items():
        monkeypatch.setenv(name, value)
    minted = _RecordingSecrets()
    monkeypatch.setattr(launcher, "secrets", minted)
    monkeypatch.setenv("STATESET_PLUGIN_QUIET", "0")  # the plugins' stderr relayed into ours: grepped too
    w, tiny = tmp_path / "work", str(tiny_model_dir)
    config = w / "sft.json"
    w.mkdir()
    config.write_text(json.dumps({"batch_size": 2, "learning_rate": 1e-3, "save_every": 2}))
    prompts = w / "prompts.jsonl"  # three held-out cases are enough to write every evaluation artifact
    prompts.write_text("".join((SAMPLES / "validation.jsonl").read_text().splitlines(keepends=True)[:3]))

    steps = [
        ["ingest", "--format", "openai", "--input", str(SAMPLES / "support_logs.jsonl"), "--output", str(w / "ing"),
         "--runtime", "subprocess"],
        ["improve", "run", "--transcripts", str(w / "ing"), "--reward", "tool_calling", "--output", str(w / "imp"),
         "--runtime", "subprocess"],
        ["train", "--algorithm", "sft", "--dataset", str(w / "imp" / "curated.jsonl"), "--reward", "tool_calling",
         "--base-model", tiny, "--steps", "2", "--config", str(config), "--output", str(w / "runs" / "sft"),
         "--reward-runtime", "subprocess"],
        ["evaluate", "--run", str(w / "runs" / "sft"), "--prompts", str(prompts), "--reward",
         "tool_calling", "--base-model", tiny, "--max-new-tokens", "4", "--output", str(w / "eval"),
         "--reward-runtime", "subprocess"],
        ["deploy", str(w / "runs" / "sft"), "--to", str(w / "registry"), "--force"],
        ["report", str(w / "runs" / "sft")],
        ["keys", "create", "--registry", str(w / "registry"), "--owner", "alice", "--scope", "infer"],
    ]
    for argv in steps:
        assert main(argv) == 0, argv
    # a registry entry's name cannot leave the registry
    assert main(["deploy", str(w / "runs" / "sft"), "--to", str(w / "registry"), "--name", "../escape", "--force"]) != 0
    assert not (w / "escape").exists()
    from stateset_agents.gateway.keys import PREFIX

    before = capfd.readouterr()
    gateway_key = next(word for word in before.out.split() if word.startswith(PREFIX))

    from stateset_agents.core.runtimes import load_component
    from stateset_agents.remote import session

    plan = {"provider": "modal", "dataset": str(w / "imp" / "curated.jsonl"), "gpu": "h100", "max_hours": 1,
            "max_cost_usd": 5.0, "image": IMAGE, "reward": "tool_calling"}
    with load_component("provider:modal") as modal:
        session.prepare(plan, w / "modal", modal)
        launched = session.launch(w / "modal", modal)
    assert launched["job"] and len(fake_modal.spawns) == 1
    errors = []
    monkeypatch.setenv("RUNPOD_API_BASE_URL", "http://127.0.0.1:9")  # nothing listens: the SDK's calls fail
    with load_component("provider:runpod") as runpod:
        with pytest.raises(Exception) as failed:
            session.prepare(dict(plan, provider="runpod", gpu="A40"), w / "runpod", runpod)
            session.launch(w / "runpod", runpod)
        errors.append(f"{type(failed.value).__name__}: {failed.value}")
    print("the failed RunPod call said:", errors[0])
    assert main(["costs"]) == 0

    printed = capfd.readouterr()
    needles = {**canaries, "gateway key": gateway_key, **{f"plugin token {i}": t for i, t in enumerate(minted.minted)}}
    assert len(minted.minted) >= 4  # ingest, improve, train and evaluate each started a subprocess plugin
    assert _leaks(tmp_path, needles) == []
    assert before.out.count(gateway_key) == 1  # `keys create` shows the key once, by design; nothing else does
    said = "\n".join([before.out.replace(gateway_key, ""), before.err, printed.out, printed.err, caplog.text,
                      *errors])
    assert "/graphql" in errors[0], errors  # the failed call was the RunPod API's
    assert [what for what, needle in needles.items() if needle in said] == [], said


PII = ("jane.doe@example.com", "+1 415 555 0199")


def test_the_gateway_capture_redacts_personal_data_by_default(tmp_path):
    from stateset_agents.gateway.capture import Capture
    from stateset_agents.gateway.server import Options

    assert Options(registry=str(tmp_path)).capture_raw is False  # `serve --capture DIR` redacts unless --capture-raw
    capture = Capture(tmp_path / "captured")  # the gateway's capture path, with its default
    request = {"model": "m", "messages": [{"role": "system", "content": f"the customer is {PII[0]}"},
                                          {"role": "user", "content": f"mail {PII[0]} or call {PII[1]}"}]}
    reply = {"index": 0, "finish_reason": "stop",
             "message": {"role": "assistant", "content": f"I will write to {PII[0]} and call {PII[1]}"}}
    path = capture.record("alice", "c1", request, [reply], {"prompt_tokens": 3, "completion_tokens": 4})
    written = path.read_text()
    assert "<EMAIL_1>" in written and "<PHONE_1>" in written
    assert not any(p in written for p in PII)
    raw = Capture(tmp_path / "raw", redact=False)  # only when asked for
    assert PII[0] in raw.record("alice", "c1", request, [reply], {}).read_text()


def test_capture_and_key_names_cannot_leave_their_directories(tmp_path):
    from stateset_agents.core.errors import InputError
    from stateset_agents.gateway.capture import Capture
    from stateset_agents.gateway.keys import create_key

    capture = Capture(tmp_path / "captured")
    (tmp_path / "alice-000001.jsonl").write_text("{}\n")  # a file beside the capture directory
    for name in ("../alice-000001.jsonl", "/etc/passwd", "alice-000001.jsonl/../../x", "..", ""):
        assert capture.path_of(name, None) is None
    for owner in ("../bob", "a/b", ".hidden", ""):
        with pytest.raises(InputError):
            create_key(tmp_path / "registry", owner, "infer")
