"""`report`: a self-contained HTML page, rendered by headless Chromium with its plots present.

Chromium is a test dependency (Debian: `apt-get install -y chromium`); a missing browser fails this test rather
than skipping it, so CI cannot go green without rendering the page."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from stateset_agents.cli import main

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
PLOTS = ("reward-curve", "kl-curve", "score-distribution")


def chromium() -> str:
    for path in (os.environ.get("CHROMIUM"), *CHROMIUM_CANDIDATES, shutil.which("chromium")):
        if path and Path(path).exists():
            return path
    pytest.fail("headless Chromium is required for the report test: apt-get install -y chromium")


def render(page: Path, *flags: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                               "--disable-background-networking", "--disable-component-update", "--disable-sync",
                               "--no-first-run", f"--user-data-dir={profile}", *flags, page.as_uri()],
                              capture_output=True, text=True, timeout=120)


def test_report_renders_in_headless_chromium_with_its_plots(run_copy, tmp_path, capsys):
    run = run_copy(0)
    assert main(["report", str(run)]) == 0
    page = run / "report.html"
    text = page.read_text()
    # self-contained: nothing to fetch (the only URL is the SVG namespace name)
    assert not re.search(r"<(script|link|img|iframe)\b", text)
    assert re.findall(r"(?:src|href)=", text) == []
    dom = render(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for plot in PLOTS:
        assert re.search(rf'<svg[^>]*id="{plot}"', dom.stdout), plot
    assert dom.stdout.count('class="series"') == 2  # the reward and KL polylines were drawn
    assert dom.stdout.count('class="bar base"') == 10 and 'id="cases"' in dom.stdout
    assert "every recorded digest matches" in dom.stdout
    shot = tmp_path / "report.png"
    result = render(page, f"--screenshot={shot}", "--window-size=1200,1600", "--hide-scrollbars")
    assert result.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
