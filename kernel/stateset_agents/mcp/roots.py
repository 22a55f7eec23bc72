"""The folders an MCP client may touch (`--root`, default the working directory).

Every path a tool takes is resolved here before the pipeline sees it: relative paths against the first root, then
through every symlink and `..` (`Path.resolve`), and refused unless the result lies inside a root, so neither
`../x` nor a symlink that points out of a root reaches anything outside."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..core.errors import InputError

PATH_MAX, NAME_MAX = 4096, 255  # Linux's limits, in bytes


class Roots:
    def __init__(self, folders: Iterable[str | os.PathLike] | None = None):
        given = [Path(f) for f in (folders or [])] or [Path.cwd()]
        self.folders: list[Path] = []
        for folder in given:
            resolved = folder.expanduser().resolve()
            if not resolved.is_dir():
                raise InputError("a --root must be an existing folder", path=str(folder), field="root")
            self.folders.append(resolved)

    def inside(self, resolved: Path) -> bool:
        return any(resolved == root or root in resolved.parents for root in self.folders)

    def path(self, value: str, field: str) -> Path:
        """`value` (a tool argument named `field`) as an absolute path inside a root, or an InputError naming it."""
        if not isinstance(value, str) or not value or "\x00" in value:
            raise InputError("a path is a non-empty string without NUL bytes", field=field)
        try:
            encoded = os.fsencode(value)
        except UnicodeError:
            raise InputError("a path must be encodable in the file system's encoding", field=field) from None
        # the kernel's limits, checked here so that no later stat() fails with "File name too long"
        if len(encoded) > PATH_MAX or any(len(part) > NAME_MAX for part in encoded.split(b"/")):
            raise InputError(f"a path is at most {PATH_MAX} bytes, each name in it at most {NAME_MAX}", field=field)
        try:
            raw = Path(value).expanduser()
        except RuntimeError:  # "~name/..." for a user this machine does not have
            raise InputError(f"{value[:80]}: no home directory for {value.partition('/')[0][:40]!r}",
                             field=field) from None
        resolved = (raw if raw.is_absolute() else self.folders[0] / raw).resolve()
        if not self.inside(resolved):
            shown = ", ".join(str(r) for r in self.folders)
            via = " (through a symlink)" if self._through_symlink(raw) else ""
            raise InputError(f"{value} is outside the folders this server may use{via}: {shown} (start the server "
                             "with --root DIR to allow another)", field=field)
        return resolved

    def _through_symlink(self, raw: Path) -> bool:
        current = raw if raw.is_absolute() else self.folders[0] / raw
        for part in [current, *current.parents]:
            if part.is_symlink():
                return True
        return False

    def relative(self, path: Path) -> str:
        """A path as the client should see it: relative to the root that holds it (absolute when none does)."""
        resolved = path.resolve()
        for root in self.folders:
            if resolved == root or root in resolved.parents:
                return str(resolved.relative_to(root)) or "."
        return str(resolved)
