"""verl's custom reward function (``reward.custom_reward_function.path`` / ``name=compute_score``): it asks our
scorer, so verl scores with exactly our reward plugins. Copied into each rendered run; it runs inside verl's own
venv (or image), so it imports the standard library only, never this project.

The scorer's address and token come from the environment the adapter launches verl with
(STATESET_AGENTS_SCORER_URL, STATESET_AGENTS_SCORER_TOKEN); each row's ``extra_info`` names the rendered row and
the experiment digest, which the scorer checks. Any failure raises: a sample is never given a made-up score.
"""
import json
import os
import urllib.request

EXPERIMENT_DIGEST = None  # the adapter writes the run's digest here when it renders this file


def _score(items, digest):
    url = os.environ["STATESET_AGENTS_SCORER_URL"].rstrip("/") + "/verl"
    body = json.dumps({"experiment_digest": digest, "items": items}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json",
        "Authorization": "Bearer " + os.environ["STATESET_AGENTS_SCORER_TOKEN"]})
    with urllib.request.urlopen(request, timeout=float(os.environ.get("STATESET_AGENTS_SCORER_TIMEOUT", "300"))) as r:
        return json.loads(r.read())


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """One sample (what verl's naive reward manager calls): {"score", "applicable"}."""
    info = extra_info or {}
    digest = info.get("experiment_digest")
    if digest != EXPERIMENT_DIGEST:
        raise ValueError(f"row of experiment {digest!r}, but this reward function serves {EXPERIMENT_DIGEST!r}")
    reply = _score([{"key": info["stateset_key"], "response": solution_str}], digest)
    return {"score": float(reply["scores"][0]), "applicable": 1.0 if reply["applicable"][0] else 0.0}
