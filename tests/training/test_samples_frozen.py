"""The quickstart's proof must not be self-made: the sample logs and the held-out splits are frozen. A change to
any of them changes its sha256 here and needs a line in CHANGELOG.md naming the new digest and saying why."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from stateset_agents.samples import make_samples

SAMPLES = Path(make_samples.__file__).resolve().parent
CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
FROZEN = {
    "support_logs.jsonl": "3c8deafc2b42b09d569eb7cd61e1a204f57210f61af288a3166535e4960b9353",
    "held_out.jsonl": "6c588024b87b92de35131583d54a6b16a2de0caedcad95fd276a4337461fd7d5",
    "validation.jsonl": "f4dc84c45aa81aa157be6c0decba8bfdc9dfdf8c529f29775ba1431aa602b8d1",
    "test.jsonl": "e712d016aa8fc57ddfe7db0ef3decb300563a39229f995bf39a3f0ec502431be",
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_sample_files_are_the_frozen_ones_and_the_changelog_names_each_digest():
    changelog = CHANGELOG.read_text()
    for name, digest in FROZEN.items():
        assert _sha(SAMPLES / name) == digest, f"{name} changed: pin its new sha256 here and say why in CHANGELOG.md"
        assert digest in changelog, f"CHANGELOG.md has no line naming {name}'s sha256"


def test_the_generator_rebuilds_every_frozen_file_byte_for_byte(tmp_path):
    make_samples.main(tmp_path)
    for name, digest in FROZEN.items():
        assert _sha(tmp_path / name) == digest, name


def test_the_splits_record_their_role_and_share_nothing_with_the_logs():
    rows = {name: [json.loads(line) for line in (SAMPLES / name).read_text().splitlines()]
            for name in ("validation.jsonl", "test.jsonl")}
    assert {r["split"] for r in rows["validation.jsonl"]} == {"validation"}
    assert {r["split"] for r in rows["test.jsonl"]} == {"test"}
    assert len(rows["test.jsonl"]) >= 30  # a single seed can reach p < 0.05 only with enough cases
    assert all(r["metadata"]["expected_tool_calls"] for rs in rows.values() for r in rs)
    logs = [json.loads(line) for line in (SAMPLES / "support_logs.jsonl").read_text().splitlines()]
    said = {m["content"] for r in logs for m in r["messages"] if m["role"] == "user"}
    openings = [r["prompt"][-1]["content"] for rs in rows.values() for r in rs]
    assert not said & set(openings) and len(set(openings)) == len(openings)
    orders = {r["metadata"]["expected_tool_calls"][0]["arguments"].get("order_id") for r in rows["test.jsonl"]}
    assert not orders & {r["metadata"]["expected_tool_calls"][0]["arguments"].get("order_id")
                         for r in rows["validation.jsonl"]} - {None}
