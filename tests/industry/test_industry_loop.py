"""The loop on each recipe's bundle, as its README prints it: `industry prepare` -> `ingest` (train split) ->
`improve run` (the recipe's first reward config and policy, no further split) -> `train` (the tiny model, two
steps, validation prompts for checkpoint selection) -> `nominate` -> `evaluate --split test`."""
from __future__ import annotations

import json
import os

import pytest

from stateset_agents.cli import main

from tests.industry.industry_helpers import FIRST_PARTY

pytest.importorskip("torch")
pytest.importorskip("peft")


@pytest.mark.parametrize("name", FIRST_PARTY)
def test_prepare_ingest_improve_train_evaluate(name, tmp_path, tiny_model_dir, monkeypatch, capsys):
    bundle = tmp_path / "bundle"
    assert main(["industry", "prepare", name, "--output", str(bundle), "--size", "16", "--seed", "2"]) == 0
    record = json.loads((bundle / "bundle.json").read_text())
    assert record["splits"]["validation"]["conversations"] and record["splits"]["test"]["conversations"]
    monkeypatch.chdir(bundle)  # the README's commands run from inside the bundle
    reward = ["--reward-config", "rewards/nsr.yaml", "--policy", "policy.yaml"]
    assert main(["ingest", "--format", "openai", "--input", "train/", "--output", "work/ingest"]) == 0
    ingested = json.loads((bundle / "work/ingest/ingest_summary.json").read_text())
    assert ingested["conversations"] == record["splits"]["train"]["conversations"]
    assert main(["improve", "run", "--transcripts", "work/ingest", *reward, "--held-out", "0",
                 "--output", "work/improve"]) == 0
    curated = (bundle / "work/improve/curated.jsonl").read_text().splitlines()
    assert len(curated) >= 2
    (bundle / "tiny.yaml").write_text("max_new_tokens: 4\nbatch_size: 2\nnum_generations: 2\nmax_prompt_tokens: 192\n")
    assert main(["train", "--dataset", "work/improve/curated.jsonl", "--algorithm", "grpo", *reward,
                 "--base-model", str(tiny_model_dir), "--eval-prompts", "validation/prompts.jsonl",
                 "--output", "work/run", "--steps", "2", "--save-every", "2", "--config", "tiny.yaml",
                 "--eval-max-new-tokens", "4", "--allow-truncation"]) == 0
    manifest = json.loads((bundle / "work/run/manifest.json").read_text())
    assert manifest["committed_updates"] == 2 and manifest["selection"]["split"] == "validation"
    assert manifest["split_isolation"]["checked"]
    best = manifest["selection"]["best_on_validation"]
    assert main(["nominate", "work/run", "--checkpoint", str(best)]) == 0
    assert main(["evaluate", "--run", "work/run", "--split", "test", "--prompts", "test/prompts.jsonl", *reward,
                 "--max-new-tokens", "4", "--allow-truncation"]) == 0
    results = json.loads((bundle / f"work/run/test/step-{best:06d}/eval_results.json").read_text())
    assert results["split"] == "test" and results["reward"]["name"] == "nsr"
    assert len(results["cases"]) == record["splits"]["test"]["conversations"]
    assert os.path.isfile(bundle / "work/run/adapter/adapter_model.safetensors")
