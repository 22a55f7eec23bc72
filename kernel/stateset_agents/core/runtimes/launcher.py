"""The subprocess runtime: start `stateset-agents plugin serve KIND:NAME` (through its light entry point,
`runtimes/serve.py`), read its handshake, connect, verify.

Like go-plugin: a fresh token per launch in the environment, one JSON handshake line on stdout, the contract
version negotiated before any work, and the child tied to us (it reads our end of its stdin and exits at EOF).
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..contracts import CONTRACT_VERSIONS
from ..errors import ContractMismatch, PluginError, StatesetError
from ..registry import ComponentSpec
from . import wire
from .client import PROXIES, Connection


def parse_handshake(line: str, component: str) -> dict[str, Any]:
    """Validate the handshake line; raise PluginError (malformed) or ContractMismatch (no common version)."""
    try:
        hs = json.loads(line)
    except json.JSONDecodeError:
        raise PluginError(component, "handshake", f"expected one JSON handshake line on stdout, got {line[:200]!r}")
    if not isinstance(hs, dict) or hs.get("protocol") != wire.PROTOCOL:
        raise PluginError(component, "handshake", f"not a {wire.PROTOCOL} handshake: {line[:200]!r}")
    if hs.get("transport") != "grpc" or not isinstance(hs.get("address"), str):
        raise PluginError(component, "handshake", f"handshake lacks a grpc transport and address: {line[:200]!r}")
    offered = hs.get("contract_versions")
    if not isinstance(offered, list) or not all(isinstance(v, int) for v in offered):
        raise PluginError(component, "handshake", "handshake lacks a list of contract_versions")
    if not set(offered) & set(CONTRACT_VERSIONS):
        raise ContractMismatch(component, offered, list(CONTRACT_VERSIONS))
    return hs


class PluginOutput:
    """A started plugin seen through its output: the first stdout line (the handshake) and stderr relayed into
    ours, prefixed, so it never blocks on a full pipe. `proc` is the process, or anything with its `pid`, `poll`,
    `wait` and `kill` (the container runtime passes a container handle); `stop` ends it gracefully."""

    def __init__(self, component: str, proc, stdout: Iterable[bytes], stderr: Iterable[bytes],
                 stop: Callable[[], None]):
        self.component, self.proc, self.stop = component, proc, stop
        self.stderr_tail: deque[str] = deque(maxlen=40)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._drain_stderr, args=(stderr,), daemon=True).start()
        threading.Thread(target=self._read_stdout, args=(stdout,), daemon=True).start()

    def _drain_stderr(self, stderr: Iterable[bytes]):
        quiet = os.environ.get("STATESET_PLUGIN_QUIET") == "1"
        for raw in stderr:
            line = raw.decode(errors="replace").rstrip()
            self.stderr_tail.append(line)
            if not quiet:
                print(f"[{self.component}] {line}", file=sys.stderr)

    def _read_stdout(self, stdout: Iterable[bytes]):
        first = True
        for raw in stdout:
            if first:
                self._lines.put(raw.decode(errors="replace").strip())
                first = False
        if first:
            self._lines.put(None)

    def handshake_line(self, timeout: float) -> str | None:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise PluginError(self.component, "handshake",
                              f"no handshake line within {timeout:.0f}s{self.stderr_hint()}") from None

    def stderr_hint(self) -> str:
        tail = [line for line in self.stderr_tail if line.strip()][-5:]
        return ("; its stderr ends with:\n  " + "\n  ".join(tail)) if tail else ""


def _stop_child(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.close()  # the child exits at EOF
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def connect(spec: ComponentSpec, out: PluginOutput, token: str, config: Mapping[str, Any] | None, *,
            timeout: float | None = None, address: Callable[[dict], str] = lambda hs: hs["address"],
            proxies: Mapping[str, type] = PROXIES):
    """Read and check the handshake, connect, verify who answers, and return the kind's proxy. Shared by every
    out-of-process runtime; `address` maps the handshake to an address we can reach (a container's port is
    published on another one). A plugin that fails any step is killed at once, with no grace period."""
    hs = None
    try:
        line = out.handshake_line(timeout or wire.HANDSHAKE_TIMEOUT_SECONDS)
        if line is None:
            out.proc.wait(timeout=5)
            raise PluginError(spec.full_name, "handshake",
                              f"the plugin exited with code {out.proc.returncode} before its handshake"
                              f"{out.stderr_hint()}")
        hs = parse_handshake(line, spec.full_name)

        def stop() -> None:
            out.stop()
            _remove_socket_dir(hs["address"])

        conn = Connection(spec.full_name, address(hs), token, process=out.proc, on_close=stop)
        meta = conn.metadata_info()
        if (meta.kind, meta.name) != (spec.kind, spec.name):
            raise PluginError(spec.full_name, "Plugin.GetMetadata",
                              f"the server says it is {meta.kind}:{meta.name}")
        if not set(meta.contract_versions) & set(CONTRACT_VERSIONS):
            raise ContractMismatch(spec.full_name, list(meta.contract_versions), list(CONTRACT_VERSIONS))
        return proxies[spec.kind](conn, meta, config)
    except BaseException:
        if out.proc.poll() is None:
            out.proc.kill()
            out.proc.wait(timeout=5)
        if hs is not None:
            _remove_socket_dir(hs["address"])
        raise


def _remove_socket_dir(address: str) -> None:
    """Remove a stopped plugin's socket and the private directory the server made for it: a plugin that was
    killed never gets to (the server removes them itself only when it exits normally). Only the server's own
    `TMP/stateset-plugin-*/plugin.sock` is touched, never a directory the user named."""
    if not address.startswith("unix://"):
        return
    sock = Path(address[len("unix://"):])
    directory = sock.parent
    if (sock.name != "plugin.sock" or not directory.name.startswith("stateset-plugin-")
            or directory.parent != Path(tempfile.gettempdir())):
        return
    for path, remove in ((sock, os.unlink), (directory, os.rmdir)):
        try:
            remove(path)
        except OSError:
            pass


def child_env(spec: ComponentSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables `spec.child_env` adds for its child process; a function that fails stops the launch."""
    if not spec.child_env:
        return {}
    import importlib

    module, _, attr = spec.child_env.partition(":")
    try:
        got = getattr(importlib.import_module(module), attr)(dict(environ))
    except StatesetError:
        raise
    except Exception as exc:  # noqa: BLE001 - named, and the component is not started
        raise PluginError(spec.full_name, "launch", f"its child_env {spec.child_env} failed: "
                                                    f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(got, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in got.items()):
        raise PluginError(spec.full_name, "launch", f"its child_env {spec.child_env} must return str -> str")
    return dict(got)


def launch_subprocess(spec: ComponentSpec, *, config: Mapping[str, Any] | None = None,
                      handshake_timeout: float | None = None, argv: list[str] | None = None):
    """Start `spec` in a child process and return its proxy (the kind's Python interface)."""
    token = secrets.token_urlsafe(32)
    env = dict(os.environ)
    env[wire.TOKEN_ENV] = token
    env[wire.PARENT_PID_ENV] = str(os.getpid())
    env.update(child_env(spec, env))
    # `python -m ...serve` is `plugin serve` without the CLI's imports
    argv = argv or [sys.executable, "-m", "stateset_agents.core.runtimes.serve", spec.full_name]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    out = PluginOutput(spec.full_name, proc, proc.stdout, proc.stderr, lambda: _stop_child(proc))
    return connect(spec, out, token, config, timeout=handshake_timeout)
