"""HostProfile: everything the resolver may know about a machine, as one value.

Detection produces it, overrides edit it, ``--host-profile FILE`` reads it,
``detect --json`` prints it. The JSON shape is a contract (DESIGN.md): in a
file, a missing field means "absent" (never "detect here") and an unknown key
is an error.
"""

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from selector_backend.engine import targets
from selector_backend.engine.versions import is_version
from selector_backend.errors import InputError, did_you_mean

LIBRARY_NAMES = ("mpi", "nccl", "gloo")
MPI_IMPLEMENTATIONS = ("mpich", "openmpi", "intelmpi", "mvapich", "cray-mpich", "unknown")
#: Machine names operating systems really report, as archspec families (macOS says
#: arm64, Windows AMD64/ARM64): accepted in profiles and detection, stored normalised.
MACHINE_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def normalise_machine(name: str) -> str:
    """'arm64' -> 'aarch64', 'AMD64' -> 'x86_64'; other names lower-cased as they are."""
    raw = name.strip().lower()
    return MACHINE_ALIASES.get(raw, raw)


MAX_CC_MAJOR = 30  # NVIDIA is at 12.x; anything far beyond is a typo, not a future GPU


_FIELDS = ("platform", "os", "machine", "libc", "python", "cpu", "gpus", "cuda_driver", "libraries", "notes")


class CpuInfo(NamedTuple):
    microarch: str
    generic: str
    family: str
    features: tuple[str, ...] = ()

    @classmethod
    def from_microarch(cls, name: str, features: tuple[str, ...] | None = None) -> "CpuInfo":
        """Derive generic level, family and features from archspec."""
        feats = features if features is not None else tuple(sorted(targets.features(name)))
        return cls(name, targets.generic(name), targets.family(name), feats)


class GpuInfo(NamedTuple):
    vendor: str
    name: str
    compute_capability: str
    memory_mib: int | None = None


class LibraryInfo(NamedTuple):
    implementation: str | None = None
    version: str | None = None
    location: str | None = None

    def describe(self) -> str:
        parts = [p for p in (self.implementation, self.version) if p]
        text = " ".join(parts) or "present"
        return f"{text} ({self.location})" if self.location else text


class HostProfile(NamedTuple):
    platform: str | None = None
    os: str | None = None
    machine: str | None = None
    libc: str | None = None
    python: str | None = None
    cpu: CpuInfo | None = None
    gpus: tuple[GpuInfo, ...] = ()
    cuda_driver: str | None = None
    libraries: Mapping[str, LibraryInfo | None] = MappingProxyType({})
    notes: tuple[str, ...] = ()

    def nvidia_gpus(self) -> tuple[GpuInfo, ...]:
        return tuple(g for g in self.gpus if g.vendor == "nvidia")

    def describe_nvidia_gpus(self, capability: bool = False) -> str:
        """The NVIDIA GPUs as they are, counted per model: ``2x Tesla T4, 1x NVIDIA RTX A6000``."""
        counts: dict[str, int] = {}
        for gpu in self.nvidia_gpus():
            name = f"{gpu.name} ({gpu.compute_capability})" if capability else gpu.name
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{n}x {name}" for name, n in counts.items())

    def library(self, name: str) -> LibraryInfo | None:
        return self.libraries.get(name)

    def with_note(self, note: str) -> "HostProfile":
        return self._replace(notes=(*self.notes, note))

    # ------------------------------------------------------------ JSON
    def to_json(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "os": self.os,
            "machine": self.machine,
            "libc": self.libc,
            "python": self.python,
            "cpu": None
            if self.cpu is None
            else {
                "microarch": self.cpu.microarch,
                "generic": self.cpu.generic,
                "family": self.cpu.family,
                "features": list(self.cpu.features),
            },
            "gpus": [
                {
                    "vendor": g.vendor,
                    "name": g.name,
                    # a non-NVIDIA GPU has no compute capability: null, not "" (which would not read back)
                    "compute_capability": g.compute_capability or None,
                    "memory_mib": g.memory_mib,
                }
                for g in self.gpus
            ],
            "cuda_driver": self.cuda_driver,
            "libraries": {
                name: None
                if info is None
                else {
                    k: v
                    for k, v in (
                        ("implementation", info.implementation),
                        ("version", info.version),
                        ("location", info.location),
                    )
                    if v is not None
                }
                for name, info in ((n, self.libraries.get(n)) for n in LIBRARY_NAMES)
            },
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "host profile") -> "HostProfile":
        return _ProfileReader(source).read(data)


# ------------------------------------------------------------------ validation helpers
def parse_version_text(text: str, what: str, source: str = "") -> str:
    """Check a dotted version ('12.4', '2.21.5'); return it unchanged."""
    where = f"{source}: " if source else ""
    if not is_version(str(text)):
        raise InputError(f"{where}{what} {text!r} is not a version like 12.4")
    return str(text)


def parse_compute_capability(text: str, source: str = "") -> str:
    """'8.0' / '80' / 'sm_80' -> '8.0'; anything else is an InputError."""
    value = str(text).strip().lower().removeprefix("sm_").removeprefix("compute_")
    match = re.fullmatch(r"(\d{1,2})\.(\d)", value) or re.fullmatch(r"(\d{1,2})(\d)", value)
    if not match or not 1 <= int(match.group(1)) <= MAX_CC_MAJOR:
        where = f"{source}: " if source else ""
        raise InputError(
            f"{where}compute capability {text!r} is not like 8.0 or sm_80 (major version 1 to {MAX_CC_MAJOR})"
        )
    return f"{int(match.group(1))}.{match.group(2)}"


class _ProfileReader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, message: str) -> InputError:
        return InputError(f"{self.source}: {message}")

    def obj(self, value: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be a JSON object")
        for key in value:
            if key not in allowed:
                shown = key if key.isprintable() else repr(key)  # one line, whatever the file holds
                hint = did_you_mean(key, allowed)
                raise self.fail(f"unknown key {where}.{shown}{hint}; allowed: {', '.join(allowed)}")
        return value

    def text(self, value: Any, where: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where} must be a non-empty string or null")
        return value

    def read(self, data: Any) -> HostProfile:
        top = self.obj(data, "profile", _FIELDS)
        platform = self.text(top.get("platform"), "platform")
        if platform is not None and platform not in ("linux", "darwin", "windows"):
            raise self.fail(
                f"platform {platform!r} is not linux, darwin or windows"
                f"{did_you_mean(platform, ('linux', 'darwin', 'windows'))}"
            )
        python = self.text(top.get("python"), "python")
        if python is not None and not re.fullmatch(r"(cp|pp)3\d+", python):
            raise self.fail(f"python {python!r} is not an interpreter tag like cp311")
        libc = self.text(top.get("libc"), "libc")
        if libc is not None and not re.fullmatch(r"(glibc|musl) \d+\.\d+", libc):
            raise self.fail(f"libc {libc!r} is not like 'glibc 2.39' or 'musl 1.2'")
        driver = self.text(top.get("cuda_driver"), "cuda_driver")
        if driver is not None:
            parse_version_text(driver, "cuda_driver", self.source)
        notes = top.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
            raise self.fail("notes must be a list of strings")
        cpu = self.read_cpu(top.get("cpu"))
        given_machine = self.text(top.get("machine"), "machine")
        machine = None if given_machine is None else normalise_machine(given_machine)
        if cpu is not None and machine is not None and cpu.family != machine:
            raise self.fail(f"cpu {cpu.microarch} belongs to the {cpu.family} family but machine is {given_machine}")
        return HostProfile(
            platform=platform,
            os=self.text(top.get("os"), "os"),
            machine=machine,
            libc=libc,
            python=python,
            cpu=cpu,
            gpus=self.read_gpus(top.get("gpus", [])),
            cuda_driver=driver,
            libraries=self.read_libraries(top.get("libraries", {})),
            notes=tuple(notes),
        )

    def read_cpu(self, value: Any) -> CpuInfo | None:
        if value is None:
            return None
        cpu = self.obj(value, "cpu", ("microarch", "generic", "family", "features"))
        name = self.text(cpu.get("microarch"), "cpu.microarch")
        if name is None:
            raise self.fail("cpu needs a microarch (an archspec name such as zen3)")
        if not targets.known_target(name):
            raise self.fail(
                f"cpu.microarch {name!r} is not an archspec microarchitecture{did_you_mean(name, targets._targets())}"
            )
        features = cpu.get("features")
        if features is not None and (not isinstance(features, list) or not all(isinstance(f, str) for f in features)):
            raise self.fail("cpu.features must be a list of strings")
        derived = CpuInfo.from_microarch(name, tuple(features) if features is not None else None)
        for key in ("generic", "family"):
            given = cpu.get(key)
            if given is not None and given != getattr(derived, key):
                raise self.fail(f"cpu.{key} {given!r} contradicts archspec ({name} is {getattr(derived, key)})")
        return derived

    def read_gpus(self, value: Any) -> tuple[GpuInfo, ...]:
        if not isinstance(value, list):
            raise self.fail("gpus must be a list")
        gpus = []
        for index, item in enumerate(value):
            where = f"gpus[{index}]"
            gpu = self.obj(item, where, ("vendor", "name", "compute_capability", "memory_mib"))
            vendor = self.text(gpu.get("vendor"), f"{where}.vendor") or "nvidia"
            cc_raw = gpu.get("compute_capability")
            if vendor == "nvidia" and cc_raw is None:
                raise self.fail(f"{where} needs a compute_capability such as 8.0")
            cc = parse_compute_capability(str(cc_raw), self.source) if cc_raw is not None else ""
            memory = gpu.get("memory_mib")
            if memory is not None and (not isinstance(memory, int) or isinstance(memory, bool) or memory < 0):
                raise self.fail(f"{where}.memory_mib must be a non-negative integer")
            gpus.append(GpuInfo(vendor, self.text(gpu.get("name"), f"{where}.name") or "unknown", cc, memory))
        return tuple(gpus)

    def read_libraries(self, value: Any) -> dict[str, LibraryInfo | None]:
        libs = self.obj(value, "libraries", LIBRARY_NAMES)
        out: dict[str, LibraryInfo | None] = {}
        for name in LIBRARY_NAMES:
            raw = libs.get(name)
            if raw is None:
                out[name] = None
                continue
            info = self.obj(raw, f"libraries.{name}", ("implementation", "version", "location"))
            impl = self.text(info.get("implementation"), f"libraries.{name}.implementation")
            if name == "mpi" and impl is not None and impl not in MPI_IMPLEMENTATIONS:
                raise self.fail(
                    f"libraries.mpi.implementation {impl!r} is unknown"
                    f"{did_you_mean(impl, MPI_IMPLEMENTATIONS)}; "
                    f"valid: {', '.join(MPI_IMPLEMENTATIONS)}"
                )
            version = self.text(info.get("version"), f"libraries.{name}.version")
            if version is not None:
                parse_version_text(version, f"libraries.{name}.version", self.source)
            out[name] = LibraryInfo(impl, version, self.text(info.get("location"), f"libraries.{name}.location"))
        return out
