"""The dependency audit's allow-list (scripts/audit_deps.py), offline: an entry needs an id, a package, a reason and
an expiry date; an expired entry stops suppressing its finding; an unallowed finding fails; an index without
vulnerability data is 'unreachable' (exit 0, said so), not a pass or a failure."""
from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("audit_deps", ROOT / "scripts" / "audit_deps.py")
audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit)

TODAY = dt.date(2026, 12, 1)
REPORT = {"dependencies": [
    {"name": "jinja2", "version": "3.1.2", "vulns": [{"id": "GHSA-h5c8-rqwp-cp95", "aliases": ["CVE-2024-22195"],
                                                      "fix_versions": ["3.1.3"]}]},
    {"name": "requests", "version": "2.31.0", "vulns": []}]}


def _allow(tmp_path, body: str) -> Path:
    path = tmp_path / "allow.toml"
    path.write_text(body)
    return path


def _run(tmp_path, allow: str, report=REPORT):
    (tmp_path / "report.json").write_text(json.dumps(report))
    code = audit.main(["--report", str(tmp_path / "report.json"), "--allow", str(_allow(tmp_path, allow)),
                       "--output", str(tmp_path / "audit.json"), "--today", TODAY.isoformat()])
    return code, json.loads((tmp_path / "audit.json").read_text()) if (tmp_path / "audit.json").exists() else None


ENTRY = '[[allow]]\nid = "CVE-2024-22195"\npackage = "jinja2"\nreason = "{reason}"\nexpires = {expires}\n'


def test_an_unallowed_finding_fails_and_is_recorded(tmp_path, capsys):
    code, result = _run(tmp_path, "")
    assert code == 1 and result["status"] == "fail"
    assert [f["id"] for f in result["findings"]] == ["GHSA-h5c8-rqwp-cp95"] and result["audited"] == 2
    assert "jinja2 3.1.2: GHSA-h5c8-rqwp-cp95 (fixed in 3.1.3)" in capsys.readouterr().out


def test_an_allowed_finding_by_its_alias_passes_until_its_expiry(tmp_path, capsys):
    code, result = _run(tmp_path, ENTRY.format(reason="the sandbox is never used", expires="2026-12-01"))
    assert code == 0 and result["status"] == "pass" and result["allowed"][0]["reason"] == "the sandbox is never used"
    code, result = _run(tmp_path, ENTRY.format(reason="the sandbox is never used", expires="2026-11-30"))
    assert code == 1 and result["findings"] and result["expired_allow"][0]["id"] == "CVE-2024-22195"
    assert "expired on 2026-11-30" in capsys.readouterr().out


@pytest.mark.parametrize("body, says", [
    (ENTRY.format(reason="  ", expires="2027-01-01"), "lacks reason"),
    ('[[allow]]\nid = "X"\npackage = "p"\nreason = "r"\n', "lacks expires"),
    (ENTRY.format(reason="r", expires='"next year"'), "is not a date"),
    ("[[allow]\n", "not TOML"),
])
def test_a_malformed_entry_is_refused_naming_it(tmp_path, body, says, capsys):
    code, result = _run(tmp_path, body)
    assert code == 2 and result is None
    err = capsys.readouterr().err
    assert says in err and "allow.toml" in err


def test_an_index_without_vulnerability_data_is_unreachable_not_a_pass(tmp_path, capsys):
    skipped = {"dependencies": [{"name": n, "skip_reason": f"Dependency not found on PyPI and could not be audited: "
                                                           f"{n} (1.0)"} for n in ("a", "b")]}
    code, result = _run(tmp_path, "", skipped)
    assert code == 0 and result["status"] == "unreachable" and result["audited"] == 0
    assert "vulnerability data unreachable" in capsys.readouterr().out


def test_the_constraints_pin_every_package_exactly():
    lines = [ln for ln in (ROOT / "constraints" / "ci.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(lines) > 100 and all("==" in ln and "@" not in ln for ln in lines)
    names = {ln.split("==")[0].lower() for ln in lines}
    assert "torch" in names and not any(n.startswith("stateset") for n in names)
