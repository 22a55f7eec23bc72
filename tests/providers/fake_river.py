"""A small in-memory River service standing in for `stateset_plugins.providers.river_sdk`.

It does the math for real with the tiny torch model (plugins/stateset_plugins/models/tiny.py) and PEFT: sampling
with per-token log-probs, forward log-probs at prediction positions, forward-backward with River's
`importance_sampling` loss (-sum(exp(logp - old) * A)), Adam steps (idempotent by key), training and inference
checkpoints and their download. It reports token usage the way the thin module does, scaled by `usage_scale` (to
play a River that bills more than the quote assumed), and counts sessions, so tests can see what was created and
closed. `gate`, when set, is called at every optimizer step (a test uses it to pace the job against the watchdog).
"""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch

NAMES = ("connect", "open_session", "close_session", "create_model", "sample", "sample_base", "sample_checkpoint",
         "forward",
         "forward_backward", "optim_step", "save", "load", "download_checkpoint", "close")


class FakeRiver:
    def __init__(self, base_model: Path, usage_scale: int = 1):
        from transformers import AutoModelForCausalLM

        self.base_path = str(base_model)
        self.base = AutoModelForCausalLM.from_pretrained(self.base_path, dtype=torch.float32)
        self.eos = int(self.base.config.eos_token_id)
        self.usage_scale = usage_scale
        self.sessions: list[dict] = []
        self.checkpoints: dict[str, dict] = {}
        self.usage = {"train_tokens": 0, "sample_tokens": 0}
        self.steps = 0
        self.gate = None

    def install(self, monkeypatch) -> "FakeRiver":
        from stateset_plugins.providers.river import sdk as river_sdk

        for name in NAMES:
            monkeypatch.setattr(river_sdk, name, getattr(self, name))
        monkeypatch.setenv("RIVER_API_KEY", "river-test-key")
        return self

    def _book(self, kind: str, tokens: int) -> dict[str, int]:
        tokens *= self.usage_scale
        self.usage[kind] += tokens
        return {kind: tokens}

    # ---------------------------------------------------------------------------------------------- sessions
    def connect(self, api_key, endpoint, sdk=None):
        assert api_key == "river-test-key"
        return SimpleNamespace(closed=False)

    def open_session(self, client, run_id):
        session = {"run_id": run_id, "open": True, "models": 0}
        self.sessions.append(session)
        return session, session

    def close_session(self, context):
        context["open"] = False

    def close(self, client):
        client.closed = True

    def create_model(self, session, base_model, lora_rank, seed=None, sdk=None):
        from peft import LoraConfig, get_peft_model

        assert session["open"] and base_model == self.base_path
        session["models"] += 1
        torch.manual_seed(seed or 0)
        net = get_peft_model(copy.deepcopy(self.base), LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank,
                                                                  target_modules="all-linear",
                                                                  task_type="CAUSAL_LM"))
        params = [p for p in net.parameters() if p.requires_grad]
        return SimpleNamespace(net=net, session=session, opt=torch.optim.Adam(params, lr=1e-3), applied={})

    # ---------------------------------------------------------------------------------------------- sampling
    @torch.no_grad()
    def _draw(self, net, prompt_ids, num_samples, max_tokens, temperature, seed):
        gen = torch.Generator().manual_seed(int(seed or 0))
        groups, tokens = [], 0
        for prompt in prompt_ids:
            group = []
            for _ in range(num_samples):
                ids, out, lps = list(prompt), [], []
                for _ in range(max_tokens):
                    logits = net(torch.tensor([ids])).logits[0, -1].float()
                    if temperature > 0:
                        logits = logits / temperature
                        t = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
                    else:
                        t = int(logits.argmax())
                    lps.append(float(torch.log_softmax(logits, -1)[t]))
                    out.append(t)
                    ids.append(t)
                    if t == self.eos:
                        break
                group.append({"tokens": out, "logprobs": lps, "stop_reason": "stop" if out[-1] == self.eos
                              else "length"})
                tokens += len(prompt) + len(out)
            groups.append(group)
        return groups, self._book("sample_tokens", tokens)

    def sample(self, model, prompt_ids, *, num_samples, max_tokens, temperature, seed):
        assert model.session["open"], "sampling on a closed session"
        return self._draw(model.net, prompt_ids, num_samples, max_tokens, temperature, seed)

    def sample_base(self, session, base_model, prompt_ids, *, max_tokens, temperature, seed):
        assert session["open"] and base_model == self.base_path
        return self._draw(self.base, prompt_ids, 1, max_tokens, temperature, seed)

    def sample_checkpoint(self, session, base_model, checkpoint, prompt_ids, *, max_tokens, temperature, seed):
        entry = self.checkpoints[checkpoint]
        assert session["open"] and base_model == self.base_path and entry["mode"] == "inference"
        return self._draw(entry["net"], prompt_ids, 1, max_tokens, temperature, seed)

    # ---------------------------------------------------------------------------------------------- training
    @staticmethod
    def _logp(net, ids):
        x = torch.tensor([ids])
        logits = net(x).logits[0, :-1].float()
        return logits.gather(-1, x[0, 1:, None]).squeeze(-1) - torch.logsumexp(logits, -1)

    def forward(self, model, data):
        assert model.session["open"]
        with torch.no_grad():
            rows = [self._logp(model.net, d["input_ids"]).tolist() + [0.0] for d in data]
        return rows, self._book("train_tokens", sum(len(d["input_ids"]) for d in data))

    def forward_backward(self, model, data, loss_fn):
        assert model.session["open"] and loss_fn == "importance_sampling"
        model.opt.zero_grad()
        total = 0.0
        for d in data:
            lp = self._logp(model.net, d["input_ids"])
            adv = torch.tensor(d["advantages"][:-1])  # River zeroes the last position: nothing follows it
            old = torch.tensor(d["old_logprobs"][:-1])
            loss = -(torch.exp(lp - old) * adv).sum()
            loss.backward()
            total += float(loss.detach())
        return {"loss": total}, self._book("train_tokens", sum(len(d["input_ids"]) for d in data))

    def optim_step(self, model, lr, grad_clip_norm, weight_decay, idempotency_key):
        assert model.session["open"]
        if idempotency_key in model.applied:
            return model.applied[idempotency_key]
        if self.gate is not None:
            self.gate()
        params = [p for p in model.net.parameters() if p.requires_grad]
        norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip_norm or float("inf")))
        for group in model.opt.param_groups:
            group["lr"], group["weight_decay"] = lr, weight_decay
        model.opt.step()
        model.opt.zero_grad()
        self.steps += 1
        model.applied[idempotency_key] = {"grad_norm": norm, "step": float(self.steps)}
        return model.applied[idempotency_key]

    # ------------------------------------------------------------------------------------------- checkpoints
    def save(self, model, name, mode="training"):
        from peft import get_peft_model_state_dict

        path = f"river://{model.session['run_id']}/weights/{name}"
        entry = {"mode": mode, "lora": copy.deepcopy(get_peft_model_state_dict(model.net)),
                 "opt": copy.deepcopy(model.opt.state_dict())}
        if mode == "inference":
            entry["net"] = copy.deepcopy(model.net)  # what sampling from this checkpoint runs
            with tempfile.TemporaryDirectory() as tmp:
                model.net.save_pretrained(tmp, safe_serialization=True)
                entry["files"] = {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
        self.checkpoints[path] = entry
        return path

    def load(self, model, path):
        from peft import set_peft_model_state_dict

        entry = self.checkpoints[path]
        set_peft_model_state_dict(model.net, entry["lora"])
        model.opt.load_state_dict(entry["opt"])

    def download_checkpoint(self, api_key, path, directory):
        entry = self.checkpoints[path]
        assert entry["mode"] == "inference", "only inference (PEFT) checkpoints download"
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in entry["files"].items():
            (directory / name).write_bytes(data)
