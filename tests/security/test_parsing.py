"""Parsing: YAML through safe loaders only, no pickle (torch.load only with weights_only=True), archives extracted
with path checks, and paths from receipts confined to their root. Behaviour first; a source scan over kernel/ and
plugins/ backs the "nowhere" claims."""
from __future__ import annotations

import base64
import io
import re
import tarfile
from pathlib import Path

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import load_mapping
from stateset_agents.plugin_api.jobs import ArtifactMismatch, safe_relpath, sha256_bytes, unpack_bundle

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("kernel", "plugins") for p in (ROOT / d).rglob("*.py") if "_pb2" not in p.name)


def _bundle(*members: tarfile.TarInfo, data: bytes = b"x") -> dict:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    raw = buf.getvalue()
    return {"b64": base64.b64encode(raw).decode(), "sha256": sha256_bytes(raw)}


def _member(name: str, **kw) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1 if kw.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for k, v in kw.items():
        setattr(info, k, v)
    return info


@pytest.mark.parametrize("member", [
    _member("../escaped.txt"),
    _member("link", type=tarfile.SYMTYPE, linkname="/etc"),
    _member("uplink", type=tarfile.SYMTYPE, linkname="../../outside"),
    _member("hard", type=tarfile.LNKTYPE, linkname="/etc/passwd"),
], ids=["dotdot", "symlink-absolute", "symlink-up", "hardlink-out"])
def test_a_bundle_member_leaving_its_directory_is_refused(tmp_path, member):
    dest = tmp_path / "ws" / "job"
    with pytest.raises(tarfile.FilterError):
        unpack_bundle(_bundle(member), dest)
    assert not (tmp_path / "ws" / "escaped.txt").exists() and not (dest / "link").exists()


def test_a_well_formed_bundle_unpacks_into_a_private_directory_and_absolute_names_stay_inside(tmp_path):
    unpack_bundle(_bundle(_member("plan.json"), _member(str(tmp_path / "absolute.txt"))), tmp_path / "job")
    assert not (tmp_path / "absolute.txt").exists()  # the data filter strips the leading "/": it lands inside
    assert (tmp_path / "job" / str(tmp_path).lstrip("/") / "absolute.txt").read_bytes() == b"x"
    assert (tmp_path / "job" / "plan.json").read_bytes() == b"x"
    assert (tmp_path / "job").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("rel", ["../../etc/passwd", "/etc/passwd", "a/../../b", ""])
def test_a_receipt_path_outside_the_run_is_refused(rel):
    with pytest.raises(ArtifactMismatch, match="unsafe path"):
        safe_relpath(rel)
    assert safe_relpath("checkpoints/step-000002/adapter/adapter_model.safetensors").startswith("checkpoints/")


def test_config_yaml_is_read_with_a_safe_loader(tmp_path):
    evil = tmp_path / "config.yaml"
    evil.write_text("steps: !!python/object/apply:os.system ['touch " + str(tmp_path / "pwned") + "']\n")
    with pytest.raises(Exception) as refused:
        load_mapping(evil)
    assert not (tmp_path / "pwned").exists()
    assert isinstance(refused.value, InputError) or "could not determine a constructor" in str(refused.value)


def test_a_planted_training_state_cannot_run_code_on_resume(tmp_path):
    torch = pytest.importorskip("torch")
    from stateset_plugins.trainers.rundir import load_training_state

    class Planted:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "pwned",))

    torch.save({"optimizer": Planted()}, tmp_path / "training_state.pt")
    with pytest.raises(Exception, match="Weights only load failed"):
        load_training_state(tmp_path / "training_state.pt")
    assert not (tmp_path / "pwned").exists()
    from stateset_plugins.models.seeding import rng_state  # what a real checkpoint holds still loads

    torch.save({"optimizer": {"state": {}}, "rng": rng_state()}, tmp_path / "real.pt")
    assert set(load_training_state(tmp_path / "real.pt")["rng"]) >= {"python", "numpy", "torch"}


# the patterns that would load code from data; each allowed exception would be listed here with its reason
UNSAFE = {
    "pickle": re.compile(r"^\s*(import|from)\s+(c?pickle|dill|cloudpickle|joblib|shelve|marshal)\b", re.M),
    "yaml.load": re.compile(r"yaml\.(load|load_all|unsafe_load|full_load)\s*\(|yaml\.(Unsafe|Full)?Loader\b"),
    "torch.load": re.compile(r"torch\.load\((?![^)]*weights_only=True)[^)]*\)"),
    "numpy allow_pickle": re.compile(r"allow_pickle\s*=\s*True"),
    "extractall without filter": re.compile(r"\.extractall\((?![^)]*filter=\"data\")[^)]*\)"),
    "zipfile": re.compile(r"^\s*(import|from)\s+zipfile\b", re.M),
}


# The exceptions, each with why it loads nothing from data.
ALLOWED = {
    "plugins/stateset_plugins/rewards/tool_calling.py: pickle":
        "marshal.dumps keys tool declarations in memory (exact, type-tagged bytes); nothing is ever loaded from it",
}


def test_no_source_file_loads_pickle_unsafe_yaml_or_unfiltered_archives():
    assert len(SOURCES) > 100
    found = [f"{p.relative_to(ROOT)}: {what}" for p in SOURCES for what, pattern in UNSAFE.items()
             if pattern.search(p.read_text(encoding="utf-8"))]
    assert sorted(set(found) - set(ALLOWED)) == []
    for exception in ALLOWED:  # an allowed module still loads nothing: no *.load/loads of what it imports
        text = (ROOT / exception.split(":")[0]).read_text(encoding="utf-8")
        assert not re.search(r"\b(c?pickle|dill|cloudpickle|joblib|shelve|marshal)\.loads?\(", text), exception
