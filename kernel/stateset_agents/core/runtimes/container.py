"""The container runtime: `stateset-agents plugin serve KIND:NAME` in the component's image, via the docker SDK.

Everything after the handshake line is the subprocess runtime's code (`launcher.connect`): the same handshake
checks, the same `Connection` and proxies, so every wire failure is the same `PluginError`. What differs:

* the image comes from the records `stateset-agents images build` writes (`images_file()`), by the components it holds;
* the container runs as the invoking user, with its token in the environment, its fixed port published on a
  loopback port of the host (the handshake address is rewritten to that side), GPUs requested for trainers
  (not when the recorded trainer image is a CPU build);
* the kernel holds the container's stdin through an attach socket: if the kernel dies, the daemon closes that
  stdin and `plugin serve` exits at EOF. Containers carry labels (run id, kernel pid and start time), and
  `reap_orphans` removes those whose kernel is gone (run on every launch);
* host paths in requests are mapped through mounts (`PathMap`): the run's artifact directory at `/artifacts`,
  and any other directory a request names, mounted on demand (the container restarts once, before the call).

The docker SDK is imported lazily: `import stateset_agents` never imports it.
"""
from __future__ import annotations

import atexit
import os
import re
import secrets
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import orjson

from ..components import Source
from ..errors import InputError, PluginError, StatesetError
from ..registry import ComponentSpec
from . import wire
from .client import PROXIES, RemoteEvaluator, RemoteIngestor, RemoteTrainer
from .launcher import PluginOutput, connect

#: Fixed inside every image: the port `plugin serve` listens on, where the artifact directory is mounted, and
#: where other host directories appear.
PORT = 50051
ARTIFACTS = "/artifacts"
HOST_MOUNTS = "/mnt/host"
LABEL = "org.stateset"
IMAGES_ENV = "STATESET_AGENTS_IMAGES"
ARTIFACTS_ENV = "STATESET_ARTIFACTS_DIR"
NO_DAEMON_HINT = ("Start one (`sudo systemctl start docker`, or `sudo dockerd &`), or point DOCKER_HOST at one; "
                  "the inprocess and subprocess runtimes work without it.")


# ------------------------------------------------------------------------------------------- the docker daemon

_client_lock = threading.Lock()
_client: Any = None


def docker_client():
    """The docker SDK's client, checked with a ping; a clear StatesetError when there is no SDK or no daemon."""
    global _client
    with _client_lock:
        if _client is not None:
            return _client
        try:
            import docker
        except ImportError:
            raise StatesetError("the container runtime needs the docker SDK: pip install docker") from None
        try:
            client = docker.from_env(timeout=120)
            client.ping()
        except Exception as exc:  # noqa: BLE001 - DockerException, requests' errors: all mean "no daemon"
            raise StatesetError(f"the container runtime needs a Docker daemon, and none answers "
                                f"({_first_line(exc)}). {NO_DAEMON_HINT}") from None
        _client = client
        return client


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def daemon_available() -> bool:
    try:
        docker_client()
        return True
    except StatesetError:
        return False


# ------------------------------------------------------------------------------------------- built images


def images_file() -> Path:
    """Where `images build` records what it built: $STATESET_AGENTS_IMAGES, else the user's cache directory."""
    if os.environ.get(IMAGES_ENV):
        return Path(os.environ[IMAGES_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "stateset-agents" / "images.json"


def read_images() -> dict[str, dict[str, Any]]:
    """Role -> record (`id`, `tag`, `components`, `contract_versions`, `version`, ...); {} when none is built."""
    try:
        data = orjson.loads(images_file().read_bytes())
    except FileNotFoundError:
        return {}
    except orjson.JSONDecodeError as exc:
        raise StatesetError(f"{images_file()}: not JSON ({exc}); delete it and rebuild the images") from None
    return data.get("images", {}) if isinstance(data, dict) else {}


def record_image(role: str, record: Mapping[str, Any]) -> Path:
    """Add or replace one role's record, atomically (temp file + rename)."""
    path = images_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    images = read_images()
    images[role] = dict(record)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps({"schema_version": 1, "images": images},
                                 option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))
    os.replace(tmp, path)
    return path


#: NAME@sha256:DIGEST: a registry manifest digest, what a remote provider can pull. A locally built image has only an
#: image id (the digest of its config), which no registry knows; `images pin` records the pushed one.
PINNED_RE = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")


def pin_image(role: str, ref: str, *, source: str) -> dict[str, Any]:
    """Record ROLE's registry digest (`pinned`, with where it came from) on its built-image record; the role must
    have been built here. Returns the record."""
    if not PINNED_RE.fullmatch(ref or ""):
        raise InputError(f"not a registry digest: {ref!r}; pin NAME@sha256:DIGEST (64 hex digits), e.g. from `docker "
                         "push`'s last line or `docker inspect --format '{{json .RepoDigests}}' IMAGE`", field="ref")
    record = read_images().get(role)
    if record is None:
        raise InputError(f"no {role} image is recorded in {images_file()}; build it first (`stateset-agents images "
                         f"build {role}`)", field="role")
    record = {**record, "pinned": ref, "pinned_source": source, "pinned_at": int(time.time())}
    record_image(role, record)
    return record


def _role_for(spec: ComponentSpec) -> str:
    """The image role that would serve `spec` (ROLE when none does: `images build --help` lists them)."""
    from ..registry import get_registry

    row = spec.as_row()
    return next((role for role, image in get_registry().image_roles().items() if image.serves(row)), "ROLE")


def image_for(spec: ComponentSpec) -> tuple[str, dict[str, Any]] | None:
    """The built image that holds `spec`: (role, record), or None."""
    for role, record in sorted(read_images().items()):
        if spec.full_name in record.get("components", ()):
            return role, record
    return None


# ------------------------------------------------------------------------------------------- orphans


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), so a reused pid is not taken for our kernel."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _kernel_labels(run_id: str, component: str) -> dict[str, str]:
    return {f"{LABEL}.run-id": run_id, f"{LABEL}.component": component, f"{LABEL}.kernel-host": socket.gethostname(),
            f"{LABEL}.kernel-pid": str(os.getpid()), f"{LABEL}.kernel-start": _start_ticks(os.getpid())}


def _kernel_alive(labels: Mapping[str, str]) -> bool:
    try:
        pid = int(labels.get(f"{LABEL}.kernel-pid", ""))
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass  # someone else's live process: not ours to judge by start time
    started = labels.get(f"{LABEL}.kernel-start", "")
    return not started or _start_ticks(pid) in ("", started)


def reap_orphans(client=None) -> list[str]:
    """Remove this host's plugin containers whose kernel process no longer exists; return their names."""
    client = client or docker_client()
    reaped = []
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}.kernel-host={socket.gethostname()}"}):
        if not _kernel_alive(c.labels):
            try:
                c.remove(force=True)
                reaped.append(c.name)
            except Exception:  # noqa: BLE001 - already gone, or being removed by its own kernel
                pass
    return reaped


# ------------------------------------------------------------------------------------------- paths


def _nearest_dir(path: str) -> str:
    d = path if os.path.isdir(path) else os.path.dirname(path)
    while d and not os.path.isdir(d):
        d = os.path.dirname(d)
    return d or "/"


class PathMap:
    """Host directories mounted into the container, and the translation of absolute paths between both sides."""

    def __init__(self, mounts: Iterable[tuple[str, str, str]] = ()):
        # (host dir, container dir, "ro" | "rw"); the longest host prefix wins where mounts nest
        self.mounts = sorted(((os.path.abspath(h), c, m) for h, c, m in mounts), key=lambda t: -len(t[0]))

    @classmethod
    def for_run(cls, artifacts_dir: str | os.PathLike | None, extra: Iterable[str] = ()) -> "PathMap":
        mounts = [(os.fspath(artifacts_dir), ARTIFACTS, "rw")] if artifacts_dir else []
        return cls(mounts).with_dirs(extra, "ro")

    def with_dirs(self, dirs: Iterable[str], mode: str) -> "PathMap":
        mounts = list(self.mounts)
        for d in dirs:
            n = len([m for m in mounts if m[1].startswith(HOST_MOUNTS)])
            mounts.append((d, f"{HOST_MOUNTS}/{n}", mode))
        return PathMap(mounts)

    def volumes(self) -> dict[str, dict[str, str]]:
        return {host: {"bind": inner, "mode": mode} for host, inner, mode in self.mounts}

    def to_container(self, path: str, *, writable: bool = False) -> str | None:
        path = os.path.abspath(path)
        for host, inner, mode in self.mounts:
            if path == host or path.startswith(host.rstrip("/") + "/"):
                if writable and mode != "rw":
                    return None
                return inner + path[len(host):] if host != "/" else inner + path
        return None

    def to_host(self, path: str) -> str:
        for host, inner, _ in sorted(self.mounts, key=lambda t: -len(t[1])):
            if path == inner or path.startswith(inner + "/"):
                return host + path[len(inner):]
        return path

    def missing(self, paths: Iterable[str], *, writable: bool = False) -> list[str]:
        """The directories to mount so that every path is visible (writable if asked)."""
        dirs = {_nearest_dir(os.path.abspath(p)) for p in paths if self.to_container(p, writable=writable) is None}
        return sorted(dirs)

    def map(self, value: Any, fn: Callable[[str], str]) -> Any:
        if isinstance(value, str):
            return fn(value)
        if isinstance(value, Mapping):
            return {k: self.map(v, fn) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.map(v, fn) for v in value]
        return value


def host_paths(value: Any) -> list[str]:
    """Strings in a request that name a host path: absolute, and the path or its parent exists."""
    found: list[str] = []
    if isinstance(value, str):
        if value.startswith("/") and "\n" not in value and len(value) < 4096 and \
                os.path.isdir(os.path.dirname(value) or "/"):
            found.append(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            found += host_paths(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            found += host_paths(v)
    return found


# ------------------------------------------------------------------------------------------- the container


class ContainerProcess:
    """A container behind the process interface `Connection` and `launcher.connect` use (pid, poll, wait, kill)."""

    def __init__(self, container):
        self.container = container
        self.returncode: int | None = None
        container.reload()
        self.pid = container.attrs["State"].get("Pid") or 0

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.container.reload()
                state = self.container.attrs["State"]
                if state["Status"] in ("exited", "dead"):
                    self.returncode = state["ExitCode"]
            except Exception:  # noqa: BLE001 - removed: it is not running
                self.returncode = -9
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = self.container.wait(timeout=timeout)["StatusCode"]
            except Exception as exc:  # noqa: BLE001 - the SDK raises requests' timeouts
                if self.poll() is None:
                    raise subprocess.TimeoutExpired(f"container {self.container.short_id}", timeout) from exc
        return self.returncode

    def kill(self) -> None:
        try:
            self.container.kill()
        except Exception:  # noqa: BLE001 - already stopped
            pass


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Docker log frames are writes, not lines: split them."""
    buf = b""
    for chunk in chunks:
        buf += chunk
        *whole, buf = buf.split(b"\n")
        yield from whole
    if buf:
        yield buf


_live: set["ContainerLaunch"] = set()


@atexit.register
def _stop_live() -> None:
    for launch in list(_live):
        launch.discard()


#: The non-root user every image creates (images/*/Dockerfile); used when the kernel itself runs as root.
IMAGE_UID = 10001
LIMITS_ENV = {"memory": "STATESET_CONTAINER_MEMORY", "cpus": "STATESET_CONTAINER_CPUS",
              "pids": "STATESET_CONTAINER_PIDS"}


def _limits(kind: str) -> dict[str, Any]:
    """Memory (bytes), CPUs (nano) and process caps: trainers and evaluators load models, so they may use 90% of
    this machine's memory and all its CPUs; other plugins 4 GiB and 2 CPUs. The STATESET_CONTAINER_* variables
    override both."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    heavy = kind in ("trainer", "evaluator")
    memory = int(total * 0.9) if heavy else min(4 << 30, int(total * 0.9))
    cpus = float(os.cpu_count() or 1) if heavy else min(2.0, float(os.cpu_count() or 1))
    pids = 4096 if heavy else 1024
    try:
        memory = int(os.environ.get(LIMITS_ENV["memory"]) or memory)
        cpus = float(os.environ.get(LIMITS_ENV["cpus"]) or cpus)
        pids = int(os.environ.get(LIMITS_ENV["pids"]) or pids)
    except ValueError as exc:
        raise InputError(f"a container limit ({', '.join(LIMITS_ENV.values())}) is not a number: {exc}") from None
    return {"memory": memory, "nano_cpus": int(cpus * 1e9), "pids": pids}


def _container_user(paths: "PathMap") -> str:
    """The invoking user, so that what the plugin writes is theirs; never root. A kernel running as root runs the
    plugin as the images' user in group 0, and makes each rw mount's top directory group-writable (root-owned
    ones only; "/" and world-writable ones are left as they are): the plugin can create files there, and can
    neither chown nor regain root (no capabilities, no-new-privileges)."""
    if os.getuid() != 0:
        return f"{os.getuid()}:{os.getgid()}"
    for host, _inner, mode in paths.mounts:
        try:
            st = os.stat(host)
        except OSError:
            continue
        if mode == "rw" and host != "/" and os.path.isdir(host) and st.st_gid == 0 and not st.st_mode & 0o002:
            os.chmod(host, (st.st_mode & 0o7777) | 0o070)
    return f"{IMAGE_UID}:0"


class ContainerLaunch:
    """One container for one component: started, connected, and stopped and removed exactly once."""

    def __init__(self, spec: ComponentSpec, config: Mapping[str, Any] | None, *, image: str | None = None,
                 artifacts_dir: str | os.PathLike | None = None, mounts: Iterable[str] = (),
                 paths: PathMap | None = None, run_id: str | None = None, gpus: int | None = None,
                 handshake_timeout: float | None = None, argv: list[str] | None = None):
        self.spec, self.config = spec, config
        self.record: dict[str, Any] = {}
        self.image = image or self._recorded_image()
        if paths is None:
            artifacts = artifacts_dir or os.environ.get(ARTIFACTS_ENV)
            paths = PathMap.for_run(artifacts, mounts)
        self.paths = paths
        self.run_id = run_id or os.environ.get("STATESET_RUN_ID") or uuid.uuid4().hex
        if gpus is None:  # trainers get every GPU, unless their recorded image is a CPU build (`images build --cpu`)
            gpus = -1 if spec.kind == "trainer" and self.record.get("device", "cuda") != "cpu" else 0
        self.gpus = gpus
        self.handshake_timeout, self.argv = handshake_timeout, argv
        self.container = None
        self._stdin = None
        self._done = threading.Lock()

    def _recorded_image(self) -> str:
        found = image_for(self.spec)
        if found is None:
            raise StatesetError(f"no built image holds {self.spec.full_name} (records: {images_file()}); build one "
                                f"with `stateset-agents images build {_role_for(self.spec)}`")
        self.record = found[1]
        return found[1]["id"]

    def options(self, token: str) -> dict[str, Any]:
        """The container's settings (kept apart from `start` so they can be checked without a daemon): a
        non-root user, every capability dropped, no privilege gain, a read-only root filesystem (only /tmp, a
        tmpfs, is writable besides the rw mounts), the default bridge network (never the host's), and memory,
        CPU and process limits (SECURITY.md, "Containers")."""
        limits = _limits(self.spec.kind)
        opts: dict[str, Any] = dict(
            image=self.image, environment={wire.TOKEN_ENV: token, "HOME": "/tmp"},
            user=_container_user(self.paths), ports={f"{PORT}/tcp": ("127.0.0.1", None)},
            volumes=self.paths.volumes(), labels=_kernel_labels(self.run_id, self.spec.full_name),
            privileged=False, cap_drop=["ALL"], security_opt=["no-new-privileges"], network_mode="bridge",
            read_only=True, tmpfs={"/tmp": "rw,exec,nosuid,nodev,mode=1777"},
            mem_limit=limits["memory"], memswap_limit=limits["memory"], nano_cpus=limits["nano_cpus"],
            pids_limit=limits["pids"],
            # detach=False is what makes the SDK set StdinOnce: stdin closes when our attach socket does
            stdin_open=True, detach=False,
            name=f"stateset-{self.spec.kind}-{self.spec.name}-{secrets.token_hex(4)}")
        if self.argv:
            opts.update(entrypoint=self.argv[:1], command=self.argv[1:])
        else:
            opts["command"] = [self.spec.full_name]
        if self.gpus:
            import docker

            opts["device_requests"] = [docker.types.DeviceRequest(count=self.gpus, capabilities=[["gpu"]])]
        return opts

    def start(self, proxies: Mapping[str, type]):
        client = docker_client()
        reap_orphans(client)
        token = secrets.token_urlsafe(32)
        try:
            self.container = client.containers.create(**self.options(token))
        except Exception as exc:  # noqa: BLE001 - explained by _docker_error
            raise self._docker_error(exc) from None
        _live.add(self)
        try:
            # Held for the container's life: when this process dies, the daemon closes the plugin's stdin.
            self._stdin = client.api.attach_socket(self.container.id, params={"stdin": 1, "stream": 1})
            try:
                self.container.start()  # where a daemon without GPU support refuses device requests
            except Exception as exc:  # noqa: BLE001
                raise self._docker_error(exc) from None
            proc = ContainerProcess(self.container)
            stdout = _lines(self.container.logs(stream=True, follow=True, stdout=True, stderr=False))
            stderr = _lines(self.container.logs(stream=True, follow=True, stdout=False, stderr=True))
            out = PluginOutput(self.spec.full_name, proc, stdout, stderr, self.discard)
            proxy = connect(self.spec, out, token, self.config, timeout=self.handshake_timeout,
                            address=self._host_address, proxies=proxies)
        except BaseException:
            self.discard()
            raise
        proxy._launch = self
        return proxy

    def _docker_error(self, exc: Exception) -> StatesetError:
        text = _first_line(exc)
        if "ImageNotFound" in type(exc).__name__ or "No such image" in text:
            return StatesetError(f"image {self.image} for {self.spec.full_name} no longer exists; rebuild it with "
                                 f"`stateset-agents images build`")
        if self.gpus and ("device driver" in text or "gpu" in text.lower()):
            return StatesetError(f"{self.spec.full_name}'s container asks for GPUs and this Docker daemon cannot "
                                 f"give them ({text}); install the NVIDIA Container Toolkit, or pass gpus=0")
        return StatesetError(f"could not start a container for {self.spec.full_name}: {text}")

    def _host_address(self, handshake: dict) -> str:
        inner = handshake["address"]
        if inner.rsplit(":", 1)[-1] != str(PORT):
            raise PluginError(self.spec.full_name, "handshake",
                              f"the image's plugin listens on {inner}, not on the fixed port {PORT}")
        self.container.reload()
        bound = (self.container.attrs["NetworkSettings"]["Ports"] or {}).get(f"{PORT}/tcp") or []
        if not bound:
            raise PluginError(self.spec.full_name, "handshake", f"port {PORT} is not published on the host")
        return f"127.0.0.1:{bound[0]['HostPort']}"

    def discard(self) -> None:
        """Stop and remove the container (idempotent): SIGTERM, a short grace, then the daemon kills it."""
        if not self._done.acquire(blocking=False):
            return
        _live.discard(self)
        if self._stdin is not None:
            try:
                self._stdin.close()
            except OSError:
                pass
        if self.container is not None:
            try:
                self.container.stop(timeout=3)
            except Exception:  # noqa: BLE001 - already stopped or gone
                pass
            try:
                self.container.remove(force=True)
            except Exception:  # noqa: BLE001
                pass

    def remounted(self, dirs: list[str], mode: str):
        """A fresh container that also sees `dirs`; the caller closes the old one first."""
        again = ContainerLaunch(self.spec, self.config, image=self.image, paths=self.paths.with_dirs(dirs, mode),
                                run_id=self.run_id, gpus=self.gpus, handshake_timeout=self.handshake_timeout,
                                argv=self.argv)
        return again.start(CONTAINER_PROXIES)


# ------------------------------------------------------------------------------------------- proxies


class _Mapped:
    """Proxies whose requests carry host paths: make them visible (restarting the container once with more
    mounts, before the call) and translate them both ways."""

    _launch: ContainerLaunch

    def _visible(self, paths: list[str], *, writable: bool) -> PathMap:
        dirs = self._launch.paths.missing(paths, writable=writable)
        if dirs:
            launch = self._launch
            self.conn.close()
            fresh = launch.remounted(dirs, "rw" if writable else "ro")
            vars(self).update(vars(fresh))  # adopt the new connection, stubs and launch; identity is the same
        return self._launch.paths


class ContainerIngestor(_Mapped, RemoteIngestor):
    def ingest(self, source: Source) -> Iterator[Any]:
        local = os.path.abspath(source.local_path or source.path)
        paths = self._visible([local], writable=False)
        # `path` is what lineage records: it stays as the user gave it; only where the plugin reads changes.
        yield from RemoteIngestor.ingest(self, Source(path=source.path, sha256=source.sha256,
                                                      local_path=paths.to_container(local)))


class _MappedStreaming(_Mapped):
    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        paths = self._visible(host_paths(request), writable=True)
        inner = paths.map(dict(request), lambda s: (paths.to_container(s) or s) if s.startswith("/") else s)
        for event in super().run(inner):
            yield paths.map(event, paths.to_host)


class ContainerTrainer(_MappedStreaming, RemoteTrainer):
    pass


class ContainerEvaluator(_MappedStreaming, RemoteEvaluator):
    pass


CONTAINER_PROXIES = {**PROXIES, "ingestor": ContainerIngestor, "trainer": ContainerTrainer,
                     "evaluator": ContainerEvaluator}


def launch_container(spec: ComponentSpec, *, config: Mapping[str, Any] | None = None, **options: Any):
    """Start `spec` in its image and return its proxy (the kind's Python interface). Options: image,
    artifacts_dir, mounts, run_id, gpus, handshake_timeout, argv (entrypoint and arguments, for tests)."""
    started = time.monotonic()
    proxy = ContainerLaunch(spec, config, **options).start(CONTAINER_PROXIES)
    proxy.start_seconds = time.monotonic() - started  # start-to-handshake latency, reported by the tests
    return proxy
