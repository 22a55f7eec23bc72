"""`improve run --engine ray`: chunks graded as Ray tasks on a local cluster (2 CPUs, one for this module), and by
this process (the driver) while the oldest task is out, give the one-process bytes, in order; a task whose worker
process dies mid-chunk is rerun, nothing lost or doubled. Chunk 0 always goes to Ray (the first chunks out are sent
before the driver grades any), and `improve_fault` never kills this process."""
from __future__ import annotations

import os

import pytest
import ray

from stateset_agents.core.errors import PluginError
from stateset_agents.pipeline.improve import run_improve
from tests.improve.worker_helpers import CHUNK, outputs, policy_file, varied_log, with_fault_reward


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False,
             object_store_memory=100 * 2 ** 20)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def fault_reward(toy_rewards, monkeypatch):
    # The workers started with the module; each run hands them its plugin modules setting.
    yield from with_fault_reward(monkeypatch)


def test_ray_writes_the_one_process_bytes_in_order(tmp_path):
    logs = varied_log(tmp_path / "in")
    pids = tmp_path / "pids"
    graded_by = tmp_path / "graded_by"
    policy = policy_file(tmp_path / "policy.json", pids=str(pids), parent=os.getpid(), hold=str(tmp_path / "hold"),
                         graded_by=str(graded_by))
    one = run_improve(logs, "improve_fault", tmp_path / "one", policy=policy, held_out_fraction=0.2)
    pids.unlink()
    graded_by.unlink()
    on_ray = run_improve(logs, "improve_fault", tmp_path / "ray", policy=policy, held_out_fraction=0.2,
                         engine="ray", chunk_bytes=CHUNK)
    assert outputs(tmp_path / "one") == outputs(tmp_path / "ray")
    assert one["counts"] == on_ray["counts"] and on_ray["counts"]["curated"] > 0
    loaded = pids.read_text().split()  # by this process and Ray's worker processes, once each
    assert str(os.getpid()) in loaded and len(set(loaded)) == len(loaded) <= 3
    who = [line.split() for line in graded_by.read_text().splitlines()]
    assert {pid for pid, _ in who} - {str(os.getpid())}  # Ray's workers graded some chunks
    assert len(who) == len({cid for _, cid in who}) == 90 - 6  # each conversation with an assistant turn once


def test_a_ray_worker_killed_mid_chunk_is_retried_and_nothing_is_lost_or_doubled(tmp_path):
    logs = varied_log(tmp_path / "in")
    marker = tmp_path / "died"
    policy = policy_file(tmp_path / "policy.json", die_at="c1", marker=str(marker), parent=os.getpid())
    marker.write_text("reference run: do not die")
    run_improve(logs, "improve_fault", tmp_path / "one", policy=policy)
    marker.unlink()
    run_improve(logs, "improve_fault", tmp_path / "ray", policy=policy, engine="ray", chunk_bytes=CHUNK)
    assert marker.read_text() not in ("", str(os.getpid()))  # a Ray worker died (in chunk 0), not this process
    assert outputs(tmp_path / "one") == outputs(tmp_path / "ray")


def test_a_chunk_that_kills_every_worker_fails_the_run_and_keeps_the_old_outputs(tmp_path):
    logs = varied_log(tmp_path / "in")
    out = tmp_path / "out"
    run_improve(logs, "improve_toy", out)
    before = outputs(out)
    policy = policy_file(tmp_path / "policy.json", die_at="c1", marker=str(tmp_path / "died"), always=True,
                         parent=os.getpid())
    with pytest.raises(PluginError, match="reward:improve_fault failed in grade: a grading task failed on the Ray "
                                          "cluster after 3 retries .*no outputs were written"):
        run_improve(logs, "improve_fault", out, policy=policy, engine="ray", chunk_bytes=CHUNK)
    assert outputs(out) == before
    assert sorted(os.listdir(out)) == sorted(before)


def test_the_cli_grades_on_ray(tmp_path):
    from stateset_agents.cli import main

    logs = varied_log(tmp_path / "in")
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output",
                 str(tmp_path / "one"), "--workers", "1"]) == 0
    assert main(["improve", "run", "--transcripts", str(logs), "--reward", "improve_toy", "--output",
                 str(tmp_path / "ray"), "--engine", "ray", "--chunk-bytes", str(CHUNK)]) == 0
    assert outputs(tmp_path / "one") == outputs(tmp_path / "ray")
    assert ray.is_initialized()  # a cluster it joined is left running
