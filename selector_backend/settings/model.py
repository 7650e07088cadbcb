"""The settings model: every knob a user can turn, with its type, default and meaning.

Each field's annotation parses and validates it (``settings.types``); the
string under a field is its documentation, from which the docs tables are
generated (``settings.docs``). A knob's names follow from its field:
``build_policy`` is ``build-policy`` in a config file and for ``-C``, and
``HVD_SELECTOR_BUILD_POLICY`` in the environment. Host facts live in the
``[host]`` table of a config file; in the environment and for ``-C`` they
keep their bare names (``HVD_SELECTOR_GPUS``, ``-C gpus=8.0``).

The models are ``typing.NamedTuple`` records, as every typed record in the
project is. No ``from __future__ import annotations`` here: the source chain
reads the parsers out of the live annotations (``typing.Annotated``).
"""

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from selector_backend.settings import types as t

ENV_PREFIX = "HVD_SELECTOR_"


class HostFacts(NamedTuple):
    """Facts that replace what detection found (the ``[host]`` table).

    A fact is given when ``Settings.origins`` names it; a given ``none`` is
    ``()`` for gpus and None for the others (absent), as on a HostProfile.
    """

    target: t.Target = None
    """host CPU microarchitecture (archspec name), e.g. x86_64_v3 or zen3; steers selection only (the import guard always checks the real CPU)"""  # noqa: E501
    os: t.ProfileText = None
    """host os in Spack naming, e.g. ubuntu24.04"""
    libc: t.ProfileText = None
    """host libc, e.g. 'glibc 2.39'"""
    python: t.ProfileText = None
    """interpreter tag, e.g. cp311"""
    gpus: t.Gpus = None
    """NVIDIA GPU compute capabilities, e.g. 8.0,8.0 or none"""
    cuda_driver: t.CudaDriver = None
    """highest CUDA version the driver supports, e.g. 12.4, or none"""
    mpi: t.Mpi = None
    """MPI runtime: 'mpich 4.2.0', 'openmpi 5.0.3' or none"""
    nccl: t.Nccl = None
    """NCCL version, e.g. 2.21.5, or none"""
    gloo: t.Gloo = None
    """system Gloo: a version, 'present' or none"""


class Settings(NamedTuple):
    """Every setting after the source chain (``load_settings``) has merged and checked them."""

    selector: t.Text = "auto"
    """selector policy: auto, cpu, gpu-nvidia, plus pins like tensor_ops=mpi"""
    index_url: t.Urls = ()
    """variant index URL(s): https://, http:// on loopback only, file:// or a directory"""
    build_policy: t.BuildPolicy = "prefer-prebuilt"
    """prefer-prebuilt, always-build (source build always) or never-build (fail instead of building)"""
    cache_dir: t.CacheDir = Path()  # replaced by its computed default when settings are loaded
    """wheels, install plans, parsed index pages and catalog memos; yours alone (see hvd-selector cache)"""
    index_timeout: t.Seconds = 30.0
    """seconds one index page request may take in all (connect to last byte) before it is retried"""
    download_timeout: t.Seconds = 600.0
    """seconds one wheel download may take in all before it is retried (each wait is bounded by index-timeout)"""
    index_file_origins: t.Origins = ()
    """other origins (https://host[:port]) an index may link its files to; by default only the index's own"""
    index_retries: t.Retries = 3
    """retries of a failed index request (5xx, timeout, reset, short body)"""
    offline: t.Flag = False
    """use only the cache and file/directory indexes; no network"""
    host_profile: t.OptionalPath = None
    """read the HostProfile JSON from this file instead of detecting"""
    variant: t.OptionalText = None
    """build exactly this variant from source ('target=x86_64_v3 tensor_ops=gloo')"""
    variant_label: t.OptionalText = None
    """install exactly this published prebuilt, never a source build: its label, or LABEL:SHA256 for the one file"""
    detect_timeout: t.DetectSeconds = 5.0
    """seconds one detector (a tool, NVML) may take before it is skipped"""
    host: HostFacts = HostFacts()
    """facts that replace detected ones"""
    origins: Mapping[str, str] = MappingProxyType({})
    """not a setting: which source gave each knob that is not at its default (for messages and notes)"""

    def fetch_options(self) -> dict[str, Any]:
        """Keyword arguments for selector_backend.install.fetch calls."""
        return {"offline": self.offline, "timeout": self.index_timeout, "retries": self.index_retries}


# HVD_SELECTOR_* variables that are not settings: accepted (not "unknown") and documented from here.
OTHER_ENV: dict[str, str] = {
    ENV_PREFIX + "CONFIG": "read this config file instead of the system and user ones",
    ENV_PREFIX + "DEBUG": "show a traceback for internal errors instead of one line",
    ENV_PREFIX + "QUIET": "1: the backend's notices (choice, fallbacks) stay off the terminal during pip install",
    ENV_PREFIX + "NVML_REPLAY": "replay recorded NVML answers from this JSON file instead of asking the driver",
    ENV_PREFIX + "RUN_GPU": "test suite: also run the tests marked gpu",
    ENV_PREFIX + "TRACE": "append one JSON line per backend decision (plan computed or reused) to this file",
    # set by `hvd-selector run` for each rank it starts; a rank may itself run hvd-selector
    ENV_PREFIX + "TIMEOUT": "hvd-selector run: seconds a rank waits for its peers (default 60), in every collective; "
    "also how long torch ranks may drift apart (no Horovod stall warning; HOROVOD_STALL_* are not read)",
    ENV_PREFIX + "RANK": "set by hvd-selector run: this process's rank",
    ENV_PREFIX + "SIZE": "set by hvd-selector run: number of ranks",
    ENV_PREFIX + "LOCAL_RANK": "set by hvd-selector run: rank on this host",
    ENV_PREFIX + "LOCAL_SIZE": "set by hvd-selector run: ranks on this host",
    ENV_PREFIX + "RENDEZVOUS": "set by hvd-selector run: the rendezvous address",
    ENV_PREFIX + "SECRET": "set by hvd-selector run: the rendezvous authentication key",
    ENV_PREFIX + "HOSTNAME": "runtime: the address this rank's data connections listen on (default: 127.0.0.1 when the "
    "rendezvous is on loopback, else the local address that reaches the rendezvous)",
    ENV_PREFIX + "HOST": "set by hvd-selector run: the host name (as given to -H) this rank runs on",
    ENV_PREFIX + "IFACE": "set by hvd-selector run --network-interface: the interface whose address a rank advertises",
    ENV_PREFIX + "BIND": "runtime: the address rank 0's rendezvous store binds (default: the rendezvous address only)",
    ENV_PREFIX + "RENDEZVOUS_ADDR": "runtime (mpirun, Slurm, torchrun jobs): the host rank 0 serves the store on",
    ENV_PREFIX + "RENDEZVOUS_PORT": "runtime (mpirun, Slurm, torchrun jobs): the port rank 0 serves the store on",
    ENV_PREFIX + "SECRET_FILE": "runtime: a file holding the job secret (jobs not started by hvd-selector run)",
    ENV_PREFIX + "SHM": "runtime: 0 turns the shared-memory transport between ranks on one host off (default 1)",
    ENV_PREFIX + "SHM_SLOT": "runtime: bytes per shared-memory buffer (two per local rank; 131072 to 1073741824, "
    "default 1048576)",
    ENV_PREFIX + "SHM_DIRECT": "runtime: auto (default) lets large shared-memory collectives read the peers' memory "
    "directly (the rule in docs/reference/transport.md) where the host's cross-memory copy is fast enough (measured at "
    "init), 1 whatever it measured, 0 keeps them on the slots, all reads directly at every size",
    ENV_PREFIX + "OBJECT_PICKLE": "hvd_selector.torch: 1 on every rank lets broadcast_object/allgather_object use "
    "full pickle (default: torch.load with weights_only=True)",
    ENV_PREFIX + "ELASTIC": "set by hvd-selector run --host-discovery-script: the elastic control store's host:port",
    ENV_PREFIX + "WORKER": "set by hvd-selector run --host-discovery-script: this worker's name in the control store",
    ENV_PREFIX + "FIRST_GENERATION": "set by hvd-selector run --host-discovery-script: the generation a worker was "
    "started for",
    ENV_PREFIX + "HOST_ID": "runtime: ranks with the same value count as one host "
    "(default: host name + boot id + pid namespace)",
    ENV_PREFIX + "NCCL_PREMULSUM": "runtime (NCCL builds): 0 scales a prescale in a separate pass instead of "
    "folding it into NCCL's PreMulSum reduction (default 1)",
}


class Option(NamedTuple):
    """One knob as the sources name it, read off a model field."""

    name: str  # config-file and -C key: build-policy
    attr: str  # field name: build_policy
    parse: t.Parser
    default: Any
    host_fact: bool = False
    named_by_env: bool = False
    default_text: str | None = None  # a computed default, as the docs show it
    compute: Any = None  # environ -> default, for a computed default

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.attr.upper()

    def parse_value(self, value: Any, where: str) -> Any:
        """The typed value, or one InputError line naming the source."""
        if self.named_by_env and where == self.env:
            return self.parse(value, self.env, "")
        return self.parse(value, self.name, where)


def _options(model: type[Any], host_fact: bool) -> list[Option]:
    out = []
    for attr, annotation in model.__annotations__.items():
        meta = getattr(annotation, "__metadata__", None)
        if not meta:
            continue  # a nested table (host) or bookkeeping (origins)
        computed = next((m for m in meta if isinstance(m, t.Computed)), None)
        out.append(
            Option(
                name=attr.replace("_", "-"),
                attr=attr,
                parse=meta[0],
                default=model._field_defaults[attr],
                host_fact=host_fact,
                named_by_env=any(isinstance(m, t.NamedByEnv) for m in meta),
                default_text=computed.text if computed else None,
                compute=computed.compute if computed else None,
            )
        )
    return out


#: Every knob, settings first, then host facts: the sources, the docs and the tests walk this.
OPTIONS: tuple[Option, ...] = (*_options(Settings, False), *_options(HostFacts, True))
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}
