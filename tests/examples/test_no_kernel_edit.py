"""The examples need no kernel edit: nothing under kernel/ names them, their components or their packages."""
from __future__ import annotations

from pathlib import Path

import pytest

KERNEL = Path(__file__).resolve().parents[2] / "kernel"
#: each example's component names, distribution and import package
NAMES = {
    "examples/stateset-trainer-rloo": ("rloo", "stateset-trainer-rloo", "stateset_trainer_rloo"),
    "examples/stateset-provider-localcmd": ("localcmd", "stateset-provider-localcmd", "stateset_provider_localcmd"),
    "examples/stateset-reward-politeness": ("politeness", "stateset-reward-politeness", "stateset_reward_politeness"),
}


def _kernel_texts():
    for path in sorted(KERNEL.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and ".egg-info" not in str(path):
            try:
                yield path, path.read_text(encoding="utf-8").lower()
            except UnicodeDecodeError:
                continue  # binary: nothing a person wrote


@pytest.mark.parametrize("example", sorted(NAMES))
def test_the_kernel_names_no_example(example):
    texts = list(_kernel_texts())
    assert len(texts) > 50  # the kernel's sources were read
    found = [f"{path.relative_to(KERNEL)} names {name!r}" for name in NAMES[example] for path, text in texts
             if name.lower() in text]
    assert not found, "\n".join(found)


def test_each_example_is_a_package_of_its_own_with_a_readme():
    root = KERNEL.parent
    for example, (component, distribution, package) in NAMES.items():
        folder = root / example
        assert (folder / "README.md").is_file() and (folder / package / "__init__.py").is_file()
        assert f'name = "{distribution}"' in (folder / "pyproject.toml").read_text()
        assert "plugins check" in (folder / "README.md").read_text(), f"{example}'s README shows `plugins check`"
