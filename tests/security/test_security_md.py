"""SECURITY.md names a test for every claim: each node id it cites is a test function that exists."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_security_md_cites_exists():
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    cited = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", text)
    assert len(cited) > 30
    missing = []
    for path, name in cited:
        source = ROOT / path
        if not source.is_file() or (name and not re.search(rf"^def {name}\(", source.read_text(), re.M)):
            missing.append(f"{path}::{name}" if name else path)
    assert missing == []
