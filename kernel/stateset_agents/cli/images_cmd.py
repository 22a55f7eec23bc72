"""`stateset-agents images build | list | reap`: one container image per plugin role, built with the docker SDK.

The kernel declares one role, `plugins` (CPU: any plugin's ingestors, rewards and evaluators); the others are
declared by the plugins that own them (`register_images`), with their Dockerfile, base image, what they serve and,
for a role on a GPU base, the pinned stacks (`images build --help` lists the installed roles).

`build ROLE` puts this project's wheel (and third-party plugin wheels, `--plugin`) into a temporary build context
with the role's Dockerfile. For an offline role it adds every dependency's wheel for the base image's Python, so the
build fetches nothing. A role with a GPU base builds that first (e.g. `Dockerfile.gpu`): by default its `cuda`
stack (torch, vLLM, transformers pinned together) from the package index inside the build; with `--cpu`, its `cpu`
test stack (CPU torch, no vLLM) whose every wheel, torch's included, is collected on the host (`--find-links` for a
local wheel directory), so that build fetches nothing either. The built image is run once to list the components
it holds; those go into its labels and into the records the container runtime reads (`$STATESET_AGENTS_IMAGES`,
else ~/.cache/stateset-agents/images.json).

A built image has an image id (the digest of its config), which no registry knows; a remote provider pulls
NAME@sha256:DIGEST, the manifest digest a registry gives the image when it is pushed. So the record keeps both, as
they are: `id`, `repo_digests` (docker's RepoDigests, empty until pushed), and `pinned` once `images pin ROLE` has
read the pushed digest from RepoDigests (or `images pin ROLE NAME@sha256:DIGEST` was told it). `train-remote`
runs the pinned digest of the image that holds its trainer, and only a pinned one.
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from .app import Group, app, console, err_console
from .registry_params import registry_command

images_app = typer.Typer(help="Build and list the container images the container runtime runs.", no_args_is_help=True,
                         cls=Group)
app.add_typer(images_app, name="images")

CACHE_ENV = "STATESET_AGENTS_WHEEL_CACHE"


def roles(registry=None) -> dict[str, Any]:
    """Every image role (name -> `registry.ImageSpec`): the kernel's `plugins` (`registry.PLUGINS_IMAGE`) and
    those the plugins declare."""
    from ..core.registry import get_registry

    return (registry or get_registry()).image_roles()


def _role_help(registry) -> str:
    return "The role: " + "; ".join(f"{name} ({spec.help})" if spec.help else name
                                    for name, spec in roles(registry).items()) + "."


def project_root(given: Path | None = None) -> Path:
    """The checkout the wheels are built from: `given`, else the one this kernel is installed from (editable)."""
    import stateset_agents

    root = given or Path(stateset_agents.__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / "images").is_dir():
        from ..core.errors import StatesetError

        raise StatesetError(f"{root} is not a stateset-agents checkout (no pyproject.toml and images/); images are "
                            "built from one: pass --project DIR")
    return root


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        from ..core.errors import StatesetError

        tail = "\n  ".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise StatesetError(f"{what} failed (pip {' '.join(args[:2])} ...):\n  {tail}")


def _image_python(client, base: str) -> dict[str, str]:
    """Ask the base image for its Python version, machine and glibc, to pick the wheels that fit it."""
    import orjson

    code = ("import json, platform, sys; print(json.dumps({'python': '%d.%d' % sys.version_info[:2], "
            "'machine': platform.machine(), 'glibc': platform.libc_ver()[1]}))")
    try:
        out = client.containers.run(base, ["python3", "-c", code], entrypoint=[], remove=True, stdout=True,
                                    stderr=True, network_disabled=True)
    except Exception as exc:  # noqa: BLE001 - ImageNotFound, ContainerError: both mean "not a usable base"
        from ..core.errors import StatesetError

        raise StatesetError(f"base image {base} cannot run python3 ({str(exc).splitlines()[0][:300]}); pull it or "
                            "build a local one (images/base/build-base)") from None
    return orjson.loads(out.decode().strip().splitlines()[-1])


def _platforms(info: dict[str, str]) -> list[str]:
    """Every manylinux tag the image's glibc accepts (pip download needs them spelled out)."""
    arch = info["machine"]
    major, minor = (int(x) for x in (info["glibc"] or "2.17").split(".")[:2])
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(17, minor + 1)]
    return tags + [f"manylinux2014_{arch}", f"linux_{arch}"]


def _plugin_wheels(dest: Path, plugins: list[Path]) -> None:
    """Each third-party plugin's wheel into `dest`: a wheel copied as it is, a project folder built into one."""
    for plugin in plugins:
        if plugin.is_file() and plugin.suffix == ".whl":
            shutil.copy2(plugin, dest)
        else:
            _pip(["wheel", "--no-deps", "-q", "-w", str(dest), str(plugin)], f"building a wheel from {plugin}")


def collect_wheels(dest: Path, root: Path, plugins: list[Path], info: dict[str, str] | None, *,
                   log: Callable[[str], None], extras: str = "", pins: list[str] = (), deps: Path | None = None,
                   find_links: list[Path] = (), extra_index: str | None = None) -> list[str]:
    """Wheels for the context: this project's, the plugins', and (when `info` names the image's Python) every
    dependency's, into `deps` (default: `dest`). The project's requirements are taken with `extras` (e.g.
    "[train]") and `pins` (requirements that must hold too, e.g. "torch==2.13.0+cpu"); `find_links` are local
    wheel directories to look in, `extra_index` one more package index. Dependencies come from a local cache
    first, so a rebuild works offline. Returns the wheels in `dest` to install by name (requirements.txt)."""
    dest.mkdir(parents=True)
    _pip(["wheel", "--no-deps", "-q", "-w", str(dest), str(root)], "building this project's wheel")
    _plugin_wheels(dest, plugins)
    direct = sorted(p.name for p in dest.glob("*.whl"))
    if info is not None:
        deps = deps or dest
        deps.mkdir(parents=True, exist_ok=True)
        cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "stateset-agents" / "wheels")
        cache.mkdir(parents=True, exist_ok=True)
        target = ["--only-binary=:all:", "--implementation", "cp", "--python-version", info["python"]]
        for tag in _platforms(info):
            target += ["--platform", tag]
        reqs = [str(dest / name) + (extras if name.startswith("stateset_agents-") else "") for name in direct]
        links = [arg for d in find_links for arg in ("--find-links", str(Path(d).resolve()))]
        links += ["--extra-index-url", extra_index] if extra_index else []
        base = ["download", "-q", "-d", str(deps), "--find-links", str(dest), *links, *target, *reqs, *pins]
        try:
            _pip([*base, "--no-index", "--find-links", str(cache)], "collecting dependency wheels offline")
            log(f"dependencies for Python {info['python']} from the wheel cache {cache}")
        except Exception:  # noqa: BLE001 - something is not cached yet: fetch it, then remember it
            _pip(base, f"downloading dependency wheels for Python {info['python']}")
            for wheel in deps.glob("*.whl"):
                if wheel.name not in direct and not (cache / wheel.name).exists():
                    shutil.copy2(wheel, cache)
            log(f"dependencies for Python {info['python']} downloaded (now cached in {cache})")
        if deps != dest:  # pip download copies the direct wheels there too: they belong to `dest` alone
            for name in direct:
                (deps / name).unlink(missing_ok=True)
    (dest / "requirements.txt").write_text("".join(f"/tmp/wheels/{name}\n" for name in direct))
    return direct


def trainer_stack(cpu: bool, torch: str | None = None, torch_index: str | None = None,
                  spec: Any = None) -> dict[str, str]:
    """The GPU base's build arguments for a role built on one (`spec`, default: the only such role): its `cuda` or
    `cpu` stack, torch overridable."""
    from ..core.errors import StatesetError

    if spec is None:
        on_gpu = [s for s in roles().values() if s.gpu_base]
        if len(on_gpu) != 1:
            raise StatesetError(f"{len(on_gpu)} image roles are built on a GPU base; name the role")
        spec = on_gpu[0]
    device = "cpu" if cpu else "cuda"
    if device not in spec.stacks:
        raise StatesetError(f"the {spec.role} role declares no {device} stack (it has {', '.join(spec.stacks)})")
    args = dict(spec.stacks[device])
    if torch:
        args["TORCH"] = torch if torch.startswith("torch") else f"torch=={torch}"
    args["TORCH_INDEX_URL"] = torch_index or ""
    args["OFFLINE"] = "1" if cpu else "0"
    return args


def _docker_build(client, *, log: Callable[[str], None], **kwargs) -> str:
    """Run one build through the SDK's low-level API, relaying its output; return the image id."""
    from ..core.errors import StatesetError

    image_id, tail = None, []
    for chunk in client.api.build(rm=True, forcerm=True, decode=True, **kwargs):
        if "error" in chunk:
            raise StatesetError("docker build failed: " + chunk["error"].strip() +
                                ("\n  " + "\n  ".join(tail[-10:]) if tail else ""))
        text = chunk.get("stream", "").rstrip()
        if text:
            tail.append(text)
            log(text)
        image_id = (chunk.get("aux") or {}).get("ID", image_id)
    if image_id is None:
        raise StatesetError("docker build ended without an image id:\n  " + "\n  ".join(tail[-10:]))
    return image_id


def _components(client, image: str, spec) -> list[str]:
    import orjson

    out = client.containers.run(image, ["plugins", "list", "--json"], entrypoint=["stateset-agents"], remove=True,
                                stdout=True, stderr=False, network_disabled=True)
    rows = orjson.loads(out)["components"]
    return sorted(r["component"] for r in rows if spec.serves(r))


def build_image(role: str, *, base: str | None = None, plugins: list[Path] = (), tag: str | None = None,
                project: Path | None = None, log: Callable[[str], None] = lambda s: None, cpu: bool = False,
                torch: str | None = None, torch_index: str | None = None,
                find_links: list[Path] = ()) -> dict[str, Any]:
    """Build ROLE's image, label it with the components inside, record it; return the record. `cpu`, `torch`,
    `torch_index` choose the GPU base's stack (`trainer_stack`); `find_links` are local wheel directories."""
    from ..core._version import __version__
    from ..core.contracts import CONTRACT_VERSIONS
    from ..core.errors import StatesetError
    from ..core.runtimes.container import LABEL, docker_client, read_images, record_image

    known = roles()
    if role not in known:
        raise typer.BadParameter(f"unknown role {role!r}; choose one of {', '.join(known)}")
    spec = known[role]
    if not spec.gpu_base and (cpu or torch or torch_index):
        raise StatesetError(f"--cpu, --torch and --torch-index choose the torch of a role on a GPU base; the {role} "
                            "role has none")
    root = project_root(project)
    client = docker_client()
    if cpu and not base:
        raise StatesetError("--cpu needs --base: an image with python3 (3.11+) and its venv module, e.g. the local "
                            "stateset-base:bookworm (images/base/build-base)")
    base = base or spec.base
    device = "cpu" if cpu else "cuda"
    tag = tag or f"stateset-agents-{role}:{__version__}" + ("-cpu" if cpu else "")
    contracts = ",".join(str(v) for v in CONTRACT_VERSIONS)
    started = time.monotonic()
    extra: dict[str, Any] = {}
    role_args: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix=f"stateset-image-{role}-") as tmp:
        ctx = Path(tmp)
        if spec.gpu_base:  # the GPU base first (e.g. Dockerfile.gpu), from the project's wheel alone
            stack = trainer_stack(cpu, torch, torch_index, spec)
            gpu = ctx / "gpu"
            if cpu:  # every wheel on the host, for the base image's Python: the build fetches nothing
                info = _image_python(client, base)
                log(f"base {base}: Python {info['python']}, {info['machine']}, glibc {info['glibc']}")
                pins = [stack["TORCH"], stack["TRANSFORMERS"]] + ([stack["VLLM"]] if stack["VLLM"] else [])
                collect_wheels(gpu / "wheels", root, [], info, log=log, extras="[train]", pins=pins,
                               deps=gpu / "deps", find_links=list(find_links), extra_index=torch_index)
            else:  # the project's wheel alone: the build installs the GPU stack from the index
                collect_wheels(gpu / "wheels", root, [], None, log=log)
            (gpu / "deps").mkdir(exist_ok=True)
            (gpu / "deps" / "requirements.txt").write_text(
                "".join(f"/tmp/deps/{w.name}\n" for w in sorted((gpu / "deps").glob("*.whl"))))
            shutil.copy2(root / spec.gpu_base, gpu / "Dockerfile")
            base_tag = (f"stateset-agents-{role}-base:{__version__}-cpu" if cpu
                        else f"stateset-agents-gpu:{__version__}")
            log(f"building the {role} base from {spec.gpu_base} on {base} ({stack['TORCH']}"
                f"{', ' + stack['VLLM'] if stack['VLLM'] else ', no vLLM'}, {stack['TRANSFORMERS']})")
            base = _docker_build(client, path=str(gpu), tag=base_tag, log=log,
                                 buildargs={"BASE_IMAGE": base, "VERSION": __version__, **stack})
            role_dir = ctx / "role" / "wheels"
            role_dir.mkdir(parents=True)
            # The kernel is in the base already; only third-party plugins remain to install.
            _plugin_wheels(role_dir, plugins)
            wheels = sorted(p.name for p in role_dir.glob("*.whl"))
            (role_dir / "requirements.txt").write_text("".join(f"/tmp/wheels/{w}\n" for w in wheels))
            role_args = {"OFFLINE": stack["OFFLINE"], "DEVICE": device}
            extra = {"device": device, "torch": stack["TORCH"], "vllm": stack["VLLM"] or None,
                     "transformers": stack["TRANSFORMERS"], "trainer_base": base}
        else:  # offline: every dependency's wheel for the base's Python; else the index serves them in the build
            info = _image_python(client, base) if spec.offline else None
            if info is not None:
                log(f"base {base}: Python {info['python']}, {info['machine']}, glibc {info['glibc']}")
            collect_wheels(ctx / "role" / "wheels", root, list(plugins), info, log=log, find_links=list(find_links))
        shutil.copy2(root / spec.dockerfile, ctx / "role" / "Dockerfile")
        built = _docker_build(client, path=str(ctx / "role"), buildargs={
            "BASE_IMAGE": base, "VERSION": __version__, "CONTRACT_VERSIONS": contracts, **role_args}, log=log)
    components = _components(client, built, spec)
    # Labels are fixed at build time, and the components are known only now: one more (metadata-only) build.
    image_id = _docker_build(client, fileobj=io.BytesIO(f"FROM {built}\n".encode()), tag=tag, log=log,
                             labels={f"{LABEL}.components": ",".join(components)})
    record = {"role": role, "tag": tag, "id": image_id, "components": components, "version": __version__,
              "contract_versions": list(CONTRACT_VERSIONS), "base_image": base, "built_at": int(time.time()),
              "build_seconds": round(time.monotonic() - started, 1), **extra}
    attrs = client.images.get(image_id).attrs
    if attrs.get("Size"):
        record["size_bytes"] = attrs["Size"]
    record["repo_digests"] = list(attrs.get("RepoDigests") or [])  # empty for a build that was never pushed
    previous = read_images().get(role, {}).get("id")
    record["records"] = str(record_image(role, record))
    if previous and previous != image_id:  # the replaced image: rebuilds on one machine must not pile up
        try:
            client.images.remove(previous, noprune=False)
        except Exception:  # noqa: BLE001 - still used by a container, or already gone
            pass
    return record


@images_app.command("build", cls=registry_command(help={"role": _role_help}))
def build_cmd(
    role: str = typer.Argument("plugins", help="The role."),
    base: Optional[str] = typer.Option(None, "--base", help="Base image (default: a public Python or CUDA image)."),
    plugin: list[Path] = typer.Option([], "--plugin", help="A third-party plugin: a wheel, or a project folder "
                                                          "to build one from (repeatable)."),
    tag: Optional[str] = typer.Option(None, "--tag", help="Image tag (default stateset-agents-ROLE:VERSION)."),
    project: Optional[Path] = typer.Option(None, "--project", help="The stateset-agents checkout to build from."),
    cpu: bool = typer.Option(False, "--cpu", help="A role on a GPU base: a CPU build for tests (its cpu stack: CPU "
                                                  "torch, no vLLM, every wheel collected on the host; needs --base)."),
    torch: Optional[str] = typer.Option(None, "--torch", help="A role on a GPU base: the torch requirement "
                                        "(default: its stack's)."),
    torch_index: Optional[str] = typer.Option(None, "--torch-index", help="A role on a GPU base: an extra package "
                                              "index for torch (e.g. https://download.pytorch.org/whl/cpu with "
                                              "--cpu)."),
    find_links: list[Path] = typer.Option([], "--find-links", help="A local directory of wheels to take "
                                          "dependencies from (e.g. a CPU torch wheel; repeatable)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Hide the build output."),
):
    """Build ROLE's image with the docker SDK and record its id and components for the container runtime."""
    record = build_image(role, base=base, plugins=plugin, tag=tag, project=project, cpu=cpu, torch=torch,
                         torch_index=torch_index, find_links=find_links,
                         log=(lambda s: None) if quiet else (lambda s: err_console.print(s, highlight=False,
                                                                                       markup=False)))
    size = f", {record['size_bytes'] / 2**30:.2f} GiB" if record.get("size_bytes") else ""
    console.print(f"built [bold]{record['tag']}[/] ({record['id'][:19]}) in {record['build_seconds']}s with "
                  f"{len(record['components'])} components{size}; recorded in {record['records']}", highlight=False)


@images_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print the records as JSON.")):
    """The built images the container runtime knows, per role."""
    from ..core.runtimes.container import images_file, read_images

    images = read_images()
    if as_json:
        import orjson

        typer.echo(orjson.dumps(images, option=orjson.OPT_INDENT_2).decode())
        return
    if not images:
        console.print(f"no images recorded in {images_file()}; build one with `stateset-agents images build`")
        return
    from rich.table import Table

    table = Table(title=f"Built images ({images_file()})")
    for column in ("role", "tag", "id", "pinned", "components"):
        table.add_column(column, overflow="fold")
    for role, rec in sorted(images.items()):
        table.add_row(role, rec.get("tag", ""), rec.get("id", "")[:19], rec.get("pinned") or "-",
                      ", ".join(rec.get("components", ())))
    console.print(table)


def repo_digests(role: str) -> tuple[dict[str, Any], list[str]]:
    """ROLE's record and the RepoDigests docker holds now for its image id (registry digests, after a push)."""
    from ..core.errors import InputError
    from ..core.runtimes.container import docker_client, images_file, read_images

    record = read_images().get(role)
    if record is None:
        raise InputError(f"no {role} image is recorded in {images_file()}; build it first (`stateset-agents images "
                         f"build {role}`)", field="role")
    client = docker_client()
    try:
        attrs = client.images.get(record["id"]).attrs
    except Exception as exc:  # noqa: BLE001 - ImageNotFound, APIError: the daemon cannot say
        from ..core.errors import StatesetError

        raise StatesetError(f"docker has no image {record['id'][:19]} ({str(exc).splitlines()[0][:200]})") from None
    return record, list(attrs.get("RepoDigests") or [])


@images_app.command("pin")
def pin_cmd(
    role: str = typer.Argument(..., help="The role whose built image to pin (e.g. the one holding your trainer)."),
    ref: Optional[str] = typer.Argument(None, help="NAME@sha256:DIGEST (default: the image's one registry digest "
                                                   "from docker's RepoDigests, after `docker push`)."),
):
    """Record the registry digest (NAME@sha256:DIGEST) of ROLE's built image, which remote providers pull: read from
    docker's RepoDigests after a push, or as given. A locally built image has only an image id; no registry knows it."""
    from ..core.errors import InputError, StatesetError
    from ..core.runtimes.container import pin_image

    source = "given"
    if ref is None:
        record, digests = repo_digests(role)
        if len(digests) != 1:
            tag = record.get("tag") or record["id"]
            raise InputError(
                (f"the {role} image {record['id'][:19]} has no registry digest: it was built here and not pushed. "
                 f"Tag and push it (`docker tag {tag} REGISTRY/NAME:TAG && docker push REGISTRY/NAME:TAG`), then run "
                 f"`stateset-agents images pin {role}` again, or pass the digest the push printed"
                 if not digests else
                 f"the {role} image has {len(digests)} registry digests ({', '.join(digests)}); pass the one to use"),
                field="ref")
        ref, source = digests[0], f"RepoDigests of {record['id']}"
    else:
        try:
            record, digests = repo_digests(role)
            if ref in digests:
                source = f"given; among the RepoDigests of {record['id']}"
            else:
                source = f"given; not among the RepoDigests of the local image {record['id']}"
        except StatesetError as exc:
            if isinstance(exc, InputError):
                raise
            source = f"given; not checked against the local image ({str(exc).splitlines()[0][:120]})"
    record = pin_image(role, ref, source=source)
    console.print(f"pinned {role}: {record['pinned']} ({source}); train-remote runs it by default", highlight=False)


@images_app.command("reap")
def reap_cmd():
    """Remove plugin containers left behind by a kernel that no longer runs (every launch does this too)."""
    from ..core.runtimes.container import reap_orphans

    reaped = reap_orphans()
    console.print(f"removed {len(reaped)} orphaned container(s)" + (f": {', '.join(reaped)}" if reaped else ""))
