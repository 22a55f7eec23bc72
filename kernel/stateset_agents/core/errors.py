"""Errors the kernel raises. Every user-facing failure is one of these, so faces render them without a trace."""
from __future__ import annotations


class StatesetError(Exception):
    """Base class: the message is what the user sees."""

    exit_code = 1


class InputError(StatesetError):
    """Bad input, located as precisely as we can: file, line (from 1) and field."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None, field: str | None = None):
        self.path, self.line, self.field, self.detail = path, line, field, message
        where = ":".join(str(p) for p in (path, line) if p is not None)
        prefix = f"{where}: " if where else ""
        suffix = f" (field '{field}')" if field else ""
        super().__init__(f"{prefix}{message}{suffix}")


class UnknownComponent(StatesetError):
    exit_code = 2


class ComponentUnavailable(StatesetError):
    """A registered component whose optional dependencies are not installed."""

    exit_code = 3

    def __init__(self, component: str, missing: list[str], install: str):
        self.component, self.missing, self.install = component, missing, install
        super().__init__(
            f"{component} is unavailable: missing {', '.join(missing)}. Install it with: {install}"
        )


class PluginError(StatesetError):
    """A plugin failed: raised, died, timed out, or broke the contract. Never swallowed into a success."""

    def __init__(self, component: str, call: str, message: str):
        self.component, self.call, self.message = component, call, message
        super().__init__(f"plugin {component} failed in {call}: {message}")


class ContractMismatch(StatesetError):
    """The plugin and the kernel share no contract version."""

    def __init__(self, component: str, offered: list[int], supported: list[int]):
        self.offered, self.supported = offered, supported
        super().__init__(
            f"plugin {component} speaks contract versions {offered}, this kernel speaks {supported}: "
            "no common version, refusing to use it"
        )
