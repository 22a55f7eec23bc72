"""The CLI's error surface: usage errors and our own errors are one clear message and a non-zero exit, no trace."""
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "stateset_agents", *args], capture_output=True, text=True,
                          timeout=60)


def test_missing_flag_is_a_usage_error():
    out = run("improve", "run", "--transcripts", "x")
    assert out.returncode == 2
    assert "Missing option" in out.stderr and "Traceback" not in out.stderr


def test_bad_input_names_the_file_and_exits_non_zero(tmp_path):
    out = run("improve", "run", "--transcripts", str(tmp_path / "nope"), "--reward", "gsm8k",
              "--output", str(tmp_path / "out"))
    assert out.returncode != 0
    assert "nope" in out.stderr and "Traceback" not in out.stderr


def test_unknown_component_lists_the_known_ones(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "transcripts.jsonl").write_text('{"id": "a", "messages": []}\n')
    out = run("improve", "run", "--transcripts", str(tmp_path / "in"), "--reward", "no_such_reward",
              "--output", str(tmp_path / "out"))
    assert out.returncode != 0
    assert "unknown reward 'no_such_reward'" in out.stderr and "gsm8k" in out.stderr
