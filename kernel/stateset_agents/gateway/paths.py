"""The folders a gateway client may name files in (`Options.roots`, default the server's working directory): a
training job's dataset, eval prompts and local base model, and every path-like string in a reward's or a plan's
config. Resolution is the MCP server's (`mcp.roots.Roots`: through every symlink and ``..``, refused unless inside a
root); this adds what a network API needs: which strings count as paths, and a 400 naming the field."""
from __future__ import annotations

import os
from pathlib import Path, PurePath
from typing import Any, Iterable

from ..core.errors import InputError
from ..mcp.roots import Roots
from .errors import bad

_MAX_DEPTH = 32


class Confined:
    def __init__(self, folders: Iterable[str | os.PathLike] | None = None):
        self.roots = Roots(list(folders or []) or None)

    def path(self, value: str, name: str) -> str:
        """A field that names a file: its absolute path inside a root (a 400 naming the field otherwise)."""
        try:
            return str(self.roots.path(value, name))
        except InputError as exc:
            raise bad(str(exc), name) from None

    def looks_like_path(self, value: str) -> bool:
        """Absolute, home-relative, with a '..' part, or naming something that exists under the first root."""
        if not value or "\x00" in value:
            return False
        if value.startswith(("/", "~", "\\")) or ".." in PurePath(value).parts:
            return True
        try:
            return os.path.lexists(self.roots.folders[0] / value)
        except (OSError, ValueError):  # too long to be a file name: text, not a path
            return False

    def maybe_path(self, value: str | None, name: str) -> str | None:
        """A field that is a path or a name (a base model: a local folder or a hub id): a path is confined and made
        absolute, a name passes as it is."""
        if value is None or not self.looks_like_path(value):
            return value
        return self.path(value, name)

    def scan(self, value: Any, name: str, depth: int = 0) -> None:
        """Refuse a config (any JSON) holding a path-like string outside the roots; the field named as a.b[2]."""
        if depth > _MAX_DEPTH:
            raise bad(f"'{name}' is nested more than {_MAX_DEPTH} levels deep", name)
        if isinstance(value, str):
            if self.looks_like_path(value):
                self.path(value, name)
        elif isinstance(value, dict):
            for key, item in value.items():
                self.scan(item, f"{name}.{key}", depth + 1)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.scan(item, f"{name}[{i}]", depth + 1)

    def describe(self) -> list[str]:
        return [str(Path(f)) for f in self.roots.folders]
