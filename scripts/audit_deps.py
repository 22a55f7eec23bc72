"""The dependency audit behind scripts/audit: pip-audit over constraints/ci.txt (no resolution: the pins are what
CI installs), findings matched against an allow-list whose entries carry an id, a reason and an expiry date.

Exit status: 0 when nothing unallowed was found, or when the vulnerability data could not be reached (said in one
line, and recorded); 1 for unallowed findings; 2 for a malformed allow-list. Writes benchmarks/results/audit.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("id", "package", "reason", "expires")


class AllowListError(ValueError):
    pass


def load_allow(path: Path, today: dt.date) -> tuple[dict[str, dict], list[dict]]:
    """(active entries by id, expired entries). Every entry needs id, package, reason (not blank) and expires
    (a date); an expired entry no longer suppresses its finding."""
    if not path.exists():
        return {}, []
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise AllowListError(f"{path}: not TOML: {exc}") from None
    active, expired = {}, []
    for n, entry in enumerate(doc.get("allow", []), 1):
        where = f"{path}: [[allow]] entry {n}"
        missing = [k for k in REQUIRED if not str(entry.get(k, "")).strip()]
        if missing:
            raise AllowListError(f"{where} lacks {', '.join(missing)} (each entry needs {', '.join(REQUIRED)})")
        expires = entry["expires"]
        if isinstance(expires, str):
            try:
                expires = dt.date.fromisoformat(expires)
            except ValueError:
                raise AllowListError(f"{where}: expires {expires!r} is not a date (YYYY-MM-DD)") from None
        if not isinstance(expires, dt.date):
            raise AllowListError(f"{where}: expires must be a date (YYYY-MM-DD)")
        record = {**entry, "expires": expires.isoformat()}
        (expired.append(record) if expires < today else active.__setitem__(entry["id"], record))
    return active, expired


def classify(report: dict, active: dict[str, dict]) -> dict:
    """pip-audit's JSON -> audited/skipped counts, findings split into allowed and not, and whether the data was
    reachable at all (a mirror without vulnerability data answers every package 'not found')."""
    deps = report.get("dependencies", [])
    skipped = [d for d in deps if d.get("skip_reason")]
    findings, allowed = [], []
    for dep in deps:
        for vuln in dep.get("vulns", []):
            ids = [vuln["id"], *vuln.get("aliases", [])]
            row = {"package": dep["name"], "version": dep.get("version"), "id": vuln["id"], "aliases": ids[1:],
                   "fix_versions": vuln.get("fix_versions", [])}
            hit = next((active[i] for i in ids if i in active and active[i]["package"].lower() == dep["name"].lower()),
                       None)
            (allowed if hit else findings).append({**row, "reason": hit["reason"], "expires": hit["expires"]}
                                                  if hit else row)
    return {"packages": len(deps), "audited": len(deps) - len(skipped), "skipped": len(skipped),
            "unreachable": bool(deps) and len(skipped) == len(deps), "findings": findings, "allowed": allowed}


def run_pip_audit(constraints: Path, timeout: float) -> tuple[dict | None, str]:
    """pip-audit's report, or None and why it could not produce one."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "pip_audit", "-r", str(constraints), "--no-deps", "--disable-pip",
                "--progress-spinner", "off", "-f", "json", "-o", str(out)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"pip-audit gave no answer within {timeout:.0f}s"
        if out.exists() and out.stat().st_size:
            return json.loads(out.read_text()), ""
        return None, (done.stderr.strip().splitlines() or [f"pip-audit exited {done.returncode}"])[-1]


def write_atomically(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--constraints", type=Path, default=ROOT / "constraints" / "ci.txt")
    ap.add_argument("--allow", type=Path, default=ROOT / "constraints" / "audit-allow.toml")
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "audit.json")
    ap.add_argument("--report", type=Path, help="A pip-audit JSON report to classify instead of running pip-audit.")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--today", type=dt.date.fromisoformat, default=dt.date.today())
    args = ap.parse_args(argv)
    try:
        active, expired = load_allow(args.allow, args.today)
    except AllowListError as exc:
        print(f"audit: {exc}", file=sys.stderr)
        return 2
    report, why = (json.loads(args.report.read_text()), "") if args.report else run_pip_audit(args.constraints,
                                                                                             args.timeout)
    result = {"date": args.today.isoformat(), "constraints": str(args.constraints), "allow_list": str(args.allow),
              "expired_allow": expired}
    if report is None:
        result.update(unreachable=True, why=why, findings=[], allowed=[])
    else:
        result.update(classify(report, active))
        if result["unreachable"]:
            result["why"] = "every package was answered 'not found' (an index without vulnerability data)"
    result["status"] = "unreachable" if result["unreachable"] else ("fail" if result["findings"] else "pass")
    write_atomically(args.output, result)
    for entry in expired:
        print(f"audit: allow-list entry {entry['id']} ({entry['package']}) expired on {entry['expires']}; "
              f"it no longer suppresses anything")
    if result["unreachable"]:
        print(f"audit: vulnerability data unreachable ({result['why']}); nothing was audited ({args.output})")
        return 0
    for f in result["findings"]:
        print(f"audit: {f['package']} {f['version']}: {f['id']} (fixed in {', '.join(f['fix_versions']) or '?'})")
    print(f"audit: {result['audited']} of {result['packages']} pinned packages audited, {len(result['findings'])} "
          f"unallowed finding(s), {len(result['allowed'])} allowed ({args.output})")
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
