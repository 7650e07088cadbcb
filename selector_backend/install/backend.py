"""The PEP 517 build backend: a verified prebuilt variant, or an exact source build.

pip runs each hook in a fresh process; the first one decides the plan
(detection + resolution) and the others of the same install reuse it
(``plan_reuse``); the chosen prebuilt wheel is downloaded
and verified into the shared cache by ``get_requires_for_build_wheel``, so
``build_wheel`` only copies it. Metadata is static and identical for every
variant. Errors print one line and exit with the documented code instead of
a traceback inside pip's output.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from selector_backend.errors import (
    EXIT_INTERNAL,
    ExternalError,
    InputError,
    IntegrityError,
    NothingFitsError,
    SelectorError,
)

if TYPE_CHECKING:
    from selector_backend.engine.host import HostProfile
    from selector_backend.engine.resolve import Candidate, Ranked
    from selector_backend.engine.variant import Variant
    from selector_backend.settings import Settings

T = TypeVar("T")
ConfigSettings = Mapping[str, Any] | None


class Plan(NamedTuple):
    """What this install will do, and why (shown with pip -v)."""

    kind: str  # "prebuilt" or "source"
    variant: Variant
    reason: str
    settings: Settings  # the settings the decision was made with
    host: HostProfile  # the host it was made for (build_requires needs it too)
    candidate: Ranked | None = None  # the chosen index wheel, for a prebuilt plan

    @property
    def wheel(self) -> Mapping[str, Any]:
        """The chosen wheel's url, sha256, filename and label (a prebuilt plan only)."""
        if self.candidate is None:
            raise AssertionError("a source plan has no wheel")
        return self.candidate.candidate.extra

    def must_fail(self, exc: ExternalError) -> bool:
        """True when a failure may not fall back to a source build (tampering, never-build)."""
        return isinstance(exc, IntegrityError) or self.settings.build_policy == "never-build"


def _clean_errors(hook: Callable[..., T]) -> Callable[..., T]:
    """SelectorError -> one line on stderr and its exit code (pip shows both)."""

    @functools.wraps(hook)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        from selector_backend.install.console import hook as in_hook

        try:
            with in_hook():
                return hook(*args, **kwargs)
        except SelectorError as exc:
            if os.environ.get("HVD_SELECTOR_DEBUG"):
                raise
            print(f"hvd-selector: error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(exc.exit_code) from None
        except Exception as exc:  # a bug: one line, as the CLI does, unless debugging
            if os.environ.get("HVD_SELECTOR_DEBUG"):
                raise
            print(
                f"hvd-selector: internal error: {type(exc).__name__}: {str(exc)[:300]} "
                "(set HVD_SELECTOR_DEBUG=1 for a traceback and report it)",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(EXIT_INTERNAL) from None

    return wrapper


# ------------------------------------------------------------------ configuration
@functools.lru_cache(maxsize=1)
def _pyproject() -> dict[str, Any]:
    from selector_backend.files.tomlfile import load_toml

    path = Path("pyproject.toml")
    return load_toml(path).data if path.is_file() else {}


def _settings(config_settings: ConfigSettings) -> Settings:
    from selector_backend.engine.project import load_project
    from selector_backend.settings import load_settings

    return load_settings(dict(config_settings or {}), pyproject=load_project().settings_table)


def make_plan(config_settings: ConfigSettings, *, editable: bool = False) -> Plan:
    """This install's plan: decided by its first hook, reused by the others (``plan_reuse``)."""
    from selector_backend.engine.catalog import default_catalog_path
    from selector_backend.install import plan_reuse
    from selector_backend.settings import config_file_candidates

    settings = _settings(config_settings)
    key = plan_reuse.plan_key(
        config_settings,
        editable=editable,
        catalog_path=default_catalog_path(),
        config_files=config_file_candidates(),
        host_profile=settings.host_profile,
    )
    stored = plan_reuse.load(settings.cache_dir, key)
    if stored is not None:
        plan = _plan_from_json(stored, settings)
        if plan is not None:
            plan_reuse.trace("plan-reused", kind=plan.kind)
            return plan
    plan = _decide(settings, editable)
    plan_reuse.trace("plan-computed", kind=plan.kind)
    plan_reuse.store(settings.cache_dir, key, _plan_to_json(plan))
    return plan


def _plan_to_json(plan: Plan) -> dict[str, Any]:
    candidate = None
    if plan.candidate is not None:
        cand = plan.candidate.candidate
        candidate = {"source": cand.source, "extra": dict(cand.extra)}
    return {
        "kind": plan.kind,
        "variant": plan.variant.to_json(),
        "reason": plan.reason,
        "host": plan.host.to_json(),
        "candidate": candidate,
    }


def _plan_from_json(data: Mapping[str, Any], settings: Settings) -> Plan | None:
    """A stored plan back as a Plan, or None when it does not read (then the plan is decided again)."""
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.host import HostProfile
    from selector_backend.engine.resolve import Candidate, Ranked

    try:
        catalog = load_catalog()
        variant = catalog.make_variant(catalog.parse_assignments(data["variant"]))
        host = HostProfile.from_json(data["host"], source="stored plan")
        ranked = None
        if data["candidate"] is not None:
            extra = {str(k): str(v) for k, v in data["candidate"]["extra"].items()}
            ranked = Ranked(Candidate(variant, str(data["candidate"]["source"]), extra), True, ())
        if data["kind"] not in ("prebuilt", "source") or (data["kind"] == "prebuilt") != (ranked is not None):
            return None
        return Plan(str(data["kind"]), variant, str(data["reason"]), settings, host, ranked)
    except (SelectorError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _decide(settings: Settings, editable: bool) -> Plan:
    """Decide prebuilt vs source for this install; fetch nothing but index pages.

    Editable installs always build from source (a development checkout), and
    so does a requested ``variant``; only a configured index is ranked.
    """
    from selector_backend.detect import host_profile_for
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.select import Sources, select
    from selector_backend.engine.variant import format_variant
    from selector_backend.install.console import warn

    catalog = load_catalog()
    policy = settings.build_policy
    unreadable: list[ExternalError] = []

    def index(host: HostProfile) -> list[Candidate]:
        """The configured index's wheels; an unreadable index falls back to a source build (unless it must not)."""
        from selector_backend.install.variant_index import index_candidates

        try:
            return list(index_candidates(settings.index_url, catalog, host, settings))
        except ExternalError as exc:
            if isinstance(exc, IntegrityError) or policy == "never-build":
                raise
            warn(f"the variant index could not be read ({exc}); falling back to a source build")
            unreadable.append(exc)
            return []

    builds_anyway = bool(settings.variant) or editable or policy == "always-build"
    ranks = not builds_anyway and bool(settings.index_url)
    if settings.variant_label and not ranks:
        why = "variant" if settings.variant else "editable" if editable else "build-policy" if builds_anyway else None
        raise NothingFitsError(
            f"variant-label {settings.variant_label} pins a published prebuilt, "
            + (f"which {why} contradicts" if why else "but no variant index is configured (set index-url)")
        )
    selection = select(settings, catalog, Sources(lambda: host_profile_for(settings), index if ranks else None))
    host = selection.host
    if settings.variant_label:
        pinned = pinned_prebuilt(selection.candidates, settings.variant_label, unreadable)
        why = f"variant-label {settings.variant_label} pins it; " + "; ".join(pinned.reasons)
        return Plan("prebuilt", pinned.variant, why, settings, host, pinned)
    if selection.requested is not None:
        why = f"variant {format_variant(selection.requested)} requested by {selection.requested_by}"
        return Plan("source", selection.requested, why, settings, host)
    if builds_anyway:
        why = "an editable install builds from source" if editable else "build-policy is always-build"
        return Plan("source", selection.require_source_build(), why, settings, host)
    if not ranks:
        why_not = "no variant index is configured (set index-url)"
    elif unreadable:
        why_not = f"the variant index could not be read ({unreadable[0]})"
    else:
        resolution = selection.resolution
        gpu_source = _gpu_host_fallback(resolution, policy, cpu_prebuilt=selection.chosen is not None)
        if gpu_source is not None:
            return Plan("source", gpu_source, resolution.notes[0], settings, host)
        if selection.chosen is not None:
            chosen = selection.chosen
            return Plan("prebuilt", chosen.variant, "; ".join(chosen.reasons), settings, host, chosen)
        ranked = resolution.ranked
        why_not = f"none of the {len(ranked)} prebuilt variants fits" + (
            f" (best: {ranked[0].first_failure()})" if ranked else ""
        )
    if policy == "never-build":
        raise NothingFitsError(f"{why_not}, and build-policy is never-build")
    return Plan("source", selection.require_source_build(), why_not, settings, host)


def pinned_prebuilt(candidates: Any, pin: str, unreadable: list[ExternalError]) -> Ranked:
    """The index wheel ``pin`` (``LABEL`` or ``LABEL:SHA256``) names, if it runs here; else one line and exit 3.

    A pin reproduces one binary: it is never traded for another wheel or a source build.
    """
    import re

    match = re.fullmatch(r"([0-9a-z._]{1,16})(?::([0-9a-fA-F]{64}))?", pin)
    if match is None:
        raise NothingFitsError(f"variant-label {pin!r} is not LABEL or LABEL:SHA256 (64 hex digits)")
    label, sha256 = match.group(1), (match.group(2) or "").lower() or None  # hex in either case, as pip's hashes
    if unreadable:
        raise NothingFitsError(f"variant-label {pin}: the variant index could not be read ({unreadable[0]})")
    named = [r for r in candidates if r.candidate.extra.get("label") == label]
    if sha256 is not None:
        named = [r for r in named if str(r.candidate.extra.get("sha256", "")).lower() == sha256]
    fitting = [r for r in named if r.compatible]
    if fitting:
        return fitting[0]
    if not named:
        what = f"no wheel labelled {label}" + (f" with sha256 {sha256[:12]}..." if sha256 else "")
        raise NothingFitsError(f"variant-label {pin}: the variant index has {what}")
    failure = next((f.reason for f in named[0].findings if not f.ok), "it does not fit this host")
    raise NothingFitsError(
        f"variant-label {pin}: {named[0].candidate.extra.get('filename')} cannot run here: {failure}"
    )


def _gpu_host_fallback(resolution: Any, policy: str | None, *, cpu_prebuilt: bool) -> Any:
    """The one rule for a GPU host no GPU prebuilt fits (docs/guide/install.md, "GPU host, no GPU build"):
    the GPU source build where the CUDA toolchain is here, else the install stops (exit 3) unless the
    user asked for the CPU build (``selector=cpu``: then there is no warning and this returns None).

    The same on every installer path: the answer never depends on a terminal (pip and uv show a
    successful hook's output only with ``-v``, so a CPU build "with a warning" was silent in CI and
    ``docker build``) nor on pip vs uv. Returns the GPU variant to build, or None to go on as the
    caller would: no warning (a CPU host, or the CPU build asked for), or the GPU source build the
    selector leaves (``cpu_prebuilt`` False), whose toolchain check names what is missing.
    """
    from selector_backend.install.build import missing_toolchain
    from selector_backend.install.console import notice

    warning = next((n for n in resolution.notes if n.startswith("WARNING: this host has")), None)
    if warning is None:
        return None
    source = resolution.source_build
    gpu = source if source is not None and source.get("cuda", "none") != "none" else None
    missing = missing_toolchain(gpu) if gpu is not None and policy != "never-build" else []
    notice(warning)
    if gpu is not None and policy != "never-build" and not missing:
        notice("the CUDA toolchain is present: building the GPU source build instead of a CPU build")
        return gpu
    if gpu is not None and not cpu_prebuilt:
        return None  # no CPU build follows: the GPU source build (or never-build's error) says what happens
    if gpu is None:
        why = "no GPU build fits this host"
    elif policy == "never-build":
        why = "build-policy is never-build, so the GPU source build is not made"
    else:
        why = f"the GPU source build needs {'; '.join(missing)}"
    raise NothingFitsError(
        f"not installing a CPU build on a host with NVIDIA GPUs unasked: {why}. To install the CPU build, say "
        "so: -C selector=cpu (or HVD_SELECTOR=cpu); for the GPU build, give the source build what it needs "
        "(the warning above names it)"
    )


def _announce(plan: Plan) -> None:
    from selector_backend.engine.nccl_pairing import NCCL_WHEEL, extra_for
    from selector_backend.engine.reinstall import reinstall_command
    from selector_backend.engine.variant import format_variant
    from selector_backend.install.console import notice

    if plan.kind == "prebuilt":
        extra = plan.wheel
        notice(f"selected prebuilt {format_variant(plan.variant)} ({extra.get('filename')}) because: {plan.reason}")
    else:
        notice(f"source build of {format_variant(plan.variant)} because: {plan.reason}")
    nccl_extra = extra_for(plan.variant)
    if nccl_extra:
        cuda = str(plan.variant.get("cuda", "none"))
        notice(
            f"this cuda={cuda} build loads NCCL at run time from {NCCL_WHEEL[cuda]} (the [gpu-nvidia] or "
            f"[{nccl_extra}] extra installs it; PyTorch's CUDA {cuda} wheels bring it too) or the system's "
            f"libnccl.so.2; without either: pip install 'hvd-selector[gpu-nvidia]'"
        )
    installed = _installed_variant()
    if installed is not None and installed != plan.variant:
        notice(
            f"warning: the installed build is {format_variant(installed)}; this install chose another. pip keys "
            f"its wheel cache by the sdist alone and reuses a cached wheel of another variant without running this "
            "backend, so whenever you change a choice reinstall past the cache with your settings added to "
            f"{reinstall_command(None, sys.executable)} (the command hvd-selector doctor prints; it checks the result)"
        )


def _installed_variant() -> Any:
    """The variant installed in the environment pip installs into, or None.

    pip runs the hooks with the target interpreter (only sys.path is isolated),
    so sysconfig's purelib is the target site-packages.
    """
    import sysconfig

    from selector_backend.engine import variant_json
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.engine.project import load_project

    try:
        catalog = load_catalog()
        path = Path(sysconfig.get_paths()["purelib"]) / load_project().package(catalog.namespace) / "variant.json"
        return variant_json.parse(path.read_text(encoding="utf-8"), catalog, source=str(path))[1]
    except (OSError, UnicodeDecodeError, SelectorError):
        return None


def _fetch_prebuilt(plan: Plan) -> Path:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.install.build import verify_wheel_variant
    from selector_backend.install.fetch import cached_download

    settings = plan.settings
    extra = plan.wheel
    return cached_download(
        extra["url"],
        extra["sha256"],
        extra["filename"],
        settings.cache_dir,
        deadline=settings.download_timeout,
        # a refused wheel is not kept; the check sees the download's temporary file, so it names the wheel
        check=lambda wheel: verify_wheel_variant(wheel, plan.variant, load_catalog(), label=extra["filename"]),
        **settings.fetch_options(),
    )


# ------------------------------------------------------------------ PEP 517 hooks
@_clean_errors
def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    from selector_backend.install.build import build_requires, check_toolchain
    from selector_backend.install.console import warn

    plan = make_plan(config_settings)
    _announce(plan)
    if plan.kind == "prebuilt":
        try:
            _fetch_prebuilt(plan)  # warm the verified cache now; build_wheel copies it
            return []
        except ExternalError as exc:
            if plan.must_fail(exc):
                raise
            warn(f"download failed ({exc}); build_wheel will fall back to a source build")
    check_toolchain(plan.variant, plan.host)  # before pip downloads the build requirements (NCCL: ~350 MB)
    return build_requires(plan.variant, plan.host)


@_clean_errors
def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    from selector_backend.install.build import build_requires, check_toolchain

    plan = make_plan(config_settings, editable=True)
    check_toolchain(plan.variant, plan.host)
    return build_requires(plan.variant, plan.host)


@_clean_errors
def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> list[str]:
    from selector_backend.engine.project import load_project

    project = load_project()
    # archspec, packaging and tomli are copied into the sdist (selector_backend.install.sdist.vendored_files)
    from selector_backend.install.sdist import SDIST_TOOLS

    if project.build_description == "cmake-file":
        return list(SDIST_TOOLS)
    # another project's own backend makes its sdist; the vendored three are copied in as for ours
    return [*project.build_requires, *SDIST_TOOLS[1:]]


@_clean_errors
def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    """Static metadata from pyproject.toml's [project] (hvd-selector's); a project whose metadata its own backend
    computes (setup.py) gets it from the wheel it will install: the verified prebuilt's, or its backend's."""
    from selector_backend.install.metadata import has_static_metadata, write_dist_info

    if has_static_metadata(_pyproject()):
        return write_dist_info(Path(metadata_directory), _pyproject())
    plan = make_plan(config_settings)
    if plan.kind == "prebuilt":
        from selector_backend.install.metadata import copy_dist_info

        try:
            return copy_dist_info(_fetch_prebuilt(plan), Path(metadata_directory))
        except ExternalError as exc:
            if plan.must_fail(exc):
                raise
    import importlib

    from selector_backend.engine.project import load_project

    own = importlib.import_module(load_project().build_backend)
    return str(own.prepare_metadata_for_build_wheel(metadata_directory, {}))


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


@_clean_errors
def build_wheel(
    wheel_directory: str, config_settings: ConfigSettings = None, metadata_directory: str | None = None
) -> str:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.install import build
    from selector_backend.install.console import warn

    plan = make_plan(config_settings)
    _announce(plan)
    catalog = load_catalog()
    name = None
    if plan.kind == "prebuilt":
        try:
            name = _install_prebuilt(plan, Path(wheel_directory))
        except ExternalError as exc:
            if plan.must_fail(exc):
                raise
            warn(f"prebuilt wheel unavailable ({exc}); falling back to a source build")
            plan = plan._replace(kind="source", reason=f"the prebuilt wheel was unavailable ({exc})")
    if name is None:
        name = build.build_wheel(plan.variant, catalog, wheel_directory)
    _record_origin(Path(wheel_directory) / name, plan)
    return name


def _record_origin(wheel: Path, plan: Plan) -> None:
    """The installed build will know the index it came from (``engine.reinstall``), each location as
    ``fetch.normalize_location`` reads it (a directory as its file:// URI, resolved here, where a relative
    path means what the user meant), so the repair commands print them as recorded."""
    from selector_backend.engine.reinstall import InstallOrigin
    from selector_backend.install import fetch
    from selector_backend.install.origin_record import add_origin

    def recorded(location: str) -> str:
        try:
            return fetch.normalize_location(location)
        except InputError:  # a location this install never read (offline): recorded as given
            return location

    settings = plan.settings
    urls = tuple(recorded(u) for u in settings.index_url)
    add_origin(wheel, InstallOrigin(urls, settings.origins.get("index-url"), plan.kind, plan.reason))


def _install_prebuilt(plan: Plan, wheel_directory: Path) -> str:
    """Verified cached wheel -> wheel_directory under the standard (label-free) name.

    ``_fetch_prebuilt`` has checked the wheel's variant records, on a cache hit as on a download.
    """
    from selector_backend.engine.wheelname import standard_filename
    from selector_backend.install.build import log
    from selector_backend.install.fetch import copy_verified

    extra = plan.wheel
    cached = _fetch_prebuilt(plan)
    name = standard_filename(extra["filename"])
    os.chmod(copy_verified(cached, extra["sha256"], wheel_directory / name), 0o644)  # the cache's copy is 0600
    log(f"installed prebuilt variant {extra.get('label')} as {name} (sha256 {extra['sha256'][:16]}… verified)")
    return name


@_clean_errors
def build_editable(
    wheel_directory: str, config_settings: ConfigSettings = None, metadata_directory: str | None = None
) -> str:
    from selector_backend.engine.catalog import load_catalog
    from selector_backend.install import build

    plan = make_plan(config_settings, editable=True)
    _announce(plan)
    return build.build_wheel(plan.variant, load_catalog(), wheel_directory, editable=True)


@_clean_errors
def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    """The project's own backend's sdist (scikit-build-core's for hvd-selector); ``-C index-url=...`` is embedded
    as the sdist's default index. Another project's sdist also carries this backend and the catalog, so that
    installing it needs nothing but what the sdist holds."""
    import importlib

    from selector_backend.engine.project import load_project
    from selector_backend.install.sdist import carry_backend, finish_sdist

    settings = _settings(config_settings)
    project = load_project()
    if project.build_description == "cmake-file":
        own = importlib.import_module("scikit_build_core.build")
    else:
        own = importlib.import_module(project.build_backend)
    name = str(own.build_sdist(sdist_directory, None))
    urls = settings.index_url if "index-url" in (config_settings or {}) else ()
    carried = carry_backend(project) if project.build_description == "flags" else {}
    finish_sdist(Path(sdist_directory) / name, tuple(urls), carried=carried)
    return name
