"""Where a rank learns who it is: the engine that started it.

Jobs start through the engines users already run, so ``init()`` reads the
identity each of them exports instead of asking for a launcher of its own:

* ``hvd-selector run`` (local or ``-H`` over ssh): ``HVD_SELECTOR_RANK`` ...
  and the launcher's store at ``HVD_SELECTOR_RENDEZVOUS``;
* ``mpirun``/``mpiexec`` starting a Gloo build: ``OMPI_COMM_WORLD_*`` (Open MPI)
  or ``PMI_RANK``/``PMI_SIZE``/``MPI_LOCALRANKID`` (MPICH's Hydra);
* torchrun and Kubernetes (Kubeflow PyTorchJob): ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``;
* Slurm (``srun``): ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``,
  ``SLURM_TASKS_PER_NODE`` and the first node of the step's node list.

Without the project's launcher, rank 0 serves the rendezvous store itself, bound
to the rendezvous address only (``HVD_SELECTOR_BIND`` widens it), and every
rank must hold the job's secret (``HVD_SELECTOR_SECRET_FILE`` or
``HVD_SELECTOR_SECRET``): the store never runs unauthenticated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

ADDR_ENV = "HVD_SELECTOR_RENDEZVOUS_ADDR"
PORT_ENV = "HVD_SELECTOR_RENDEZVOUS_PORT"
SECRET_ENV = "HVD_SELECTOR_SECRET"
SECRET_FILE_ENV = "HVD_SELECTOR_SECRET_FILE"
BIND_ENV = "HVD_SELECTOR_BIND"


class JobEnvError(ValueError):
    """The environment names a job but something in it is missing or malformed."""


@dataclass(frozen=True)
class JobEnv:
    """One rank's place in the job and where its rendezvous store is."""

    source: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    port: int
    serve_store: bool  # rank 0 runs the store (no hvd-selector launcher)
    size_from: str = ""  # the variable that said how many ranks the job has


def int_env(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    text = env.get(name, "").strip()
    if not text and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise JobEnvError(f"{name}={text!r} must be an integer") from None


def _address(text: str, what: str, default_port: int | None) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = text.strip(), ""
    host = host.strip("[]")
    if not host:
        raise JobEnvError(f"{what}={text!r} must be host:port")
    if not port:
        if default_port is None:
            raise JobEnvError(f"{what}={text!r} must be host:port")
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise JobEnvError(f"{what}={text!r}: the port must be 1-65535")
    return host, int(port)


def first_slurm_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist (``node[03-05,9],login1`` -> ``node03``)."""
    match = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?", nodelist.strip())
    if not match or not (match.group(1) or match.group(2)):
        raise JobEnvError(f"cannot read the first host of the Slurm node list {nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def slurm_tasks_on_node(tasks_per_node: str, node_id: int) -> int:
    """Tasks on node ``node_id`` from ``SLURM_TASKS_PER_NODE`` (``2(x3),1``)."""
    counts: list[int] = []
    for item in tasks_per_node.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise JobEnvError(f"SLURM_TASKS_PER_NODE={tasks_per_node!r} is not in Slurm's format")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    if not 0 <= node_id < len(counts):
        raise JobEnvError(f"SLURM_NODEID={node_id} is outside SLURM_TASKS_PER_NODE={tasks_per_node!r}")
    return counts[node_id]


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``host:port`` as (host, port), or a one-line JobEnvError naming ``what``."""
    return _address(text, what, None)


def _override(env: Mapping[str, str], host: str, port: int) -> tuple[str, int]:
    if env.get(ADDR_ENV, "").strip():
        host, port = _address(env[ADDR_ENV], ADDR_ENV, port or None)
    if env.get(PORT_ENV, "").strip():
        port = int_env(env, PORT_ENV)
    return host, port


def discover(env: Mapping[str, str]) -> JobEnv | None:
    """The job this process belongs to, or None for a single rank started on its own."""
    if env.get("HVD_SELECTOR_RENDEZVOUS", "").strip():
        host, port = _address(env["HVD_SELECTOR_RENDEZVOUS"], "HVD_SELECTOR_RENDEZVOUS", None)
        return JobEnv(
            "hvd-selector run",
            int_env(env, "HVD_SELECTOR_RANK"),
            int_env(env, "HVD_SELECTOR_SIZE"),
            int_env(env, "HVD_SELECTOR_LOCAL_RANK"),
            int_env(env, "HVD_SELECTOR_LOCAL_SIZE"),
            host,
            port,
            serve_store=False,
            size_from="HVD_SELECTOR_SIZE",
        )
    if "OMPI_COMM_WORLD_RANK" in env:
        ids = (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        )
        return _mpi(env, "Open MPI's mpirun", ids)
    if "PMI_RANK" in env:
        return _mpi(env, "mpiexec (PMI)", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"))
    if "RANK" in env and "WORLD_SIZE" in env:
        if not env.get("MASTER_ADDR") or not env.get("MASTER_PORT"):
            raise JobEnvError(
                "RANK and WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT are not (torchrun sets all four)"
            )
        port = int_env(env, "MASTER_PORT")
        # torchrun's agent already listens on MASTER_PORT; a plain Kubernetes pod does not.
        port += 1 if "TORCHELASTIC_RUN_ID" in env else 0
        host, port = _override(env, env["MASTER_ADDR"].strip(), port)
        return JobEnv(
            "torchrun" if "TORCHELASTIC_RUN_ID" in env else "RANK/WORLD_SIZE environment",
            int_env(env, "RANK"),
            int_env(env, "WORLD_SIZE"),
            int_env(env, "LOCAL_RANK", 0),
            int_env(env, "LOCAL_WORLD_SIZE", 1),
            host,
            port,
            serve_store=True,
            size_from="WORLD_SIZE",
        )
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        job = int_env(env, "SLURM_JOB_ID", 0)
        step = int_env(env, "SLURM_STEP_ID", 0)
        port = 20000 + (job * 16 + step) % 20000  # same on every rank, differs between steps
        host, port = _override(env, first_slurm_host(nodes) if nodes else "", port)
        if not host:
            raise JobEnvError(f"Slurm gives no node list; set {ADDR_ENV}=host:port")
        tasks = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
        local_size = slurm_tasks_on_node(tasks, int_env(env, "SLURM_NODEID", 0)) if tasks else 1
        return JobEnv(
            "Slurm",
            int_env(env, "SLURM_PROCID"),
            int_env(env, "SLURM_NTASKS"),
            int_env(env, "SLURM_LOCALID", 0),
            local_size,
            host,
            port,
            serve_store=True,
            size_from="SLURM_NTASKS",
        )
    return None


def _mpi(env: Mapping[str, str], source: str, names: tuple[str, str, str, str]) -> JobEnv:
    rank, size = int_env(env, names[0]), int_env(env, names[1])
    local_rank, local_size = int_env(env, names[2], 0), int_env(env, names[3], 1)
    if not env.get(ADDR_ENV, "").strip():
        host, port = "", 0  # fine for MPI builds; a Gloo build asks for it (require_address)
    else:
        host, port = _address(env[ADDR_ENV], ADDR_ENV, None)
    return JobEnv(source, rank, size, local_rank, local_size, host, port, serve_store=True, size_from=names[1])


def require_address(job: JobEnv) -> None:
    """A Gloo rendezvous needs an address; MPI launchers do not give one."""
    if not job.host:
        raise JobEnvError(
            f"a Gloo build started by {job.source} needs the rendezvous address: export {ADDR_ENV}=host:port "
            f"(a port on rank 0's host) and a secret file to every rank, e.g. mpirun -x {ADDR_ENV} "
            f"-x {SECRET_FILE_ENV}"
        )


def read_secret(env: Mapping[str, str], source: str) -> bytes:
    """The job's shared key: from a file (preferred: never in ps or env dumps) or hex in the env."""
    path = env.get(SECRET_FILE_ENV, "").strip()
    if path:
        try:
            with open(path, encoding="ascii") as handle:
                text = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise JobEnvError(f"{SECRET_FILE_ENV}={path!r} cannot be read: {exc}") from None
        what = SECRET_FILE_ENV
    else:
        text, what = env.get(SECRET_ENV, "").strip(), SECRET_ENV
    if not text:
        raise JobEnvError(
            f"a job started by {source} needs a shared secret on every rank: set {SECRET_FILE_ENV} to a file "
            f"holding the same hex key (e.g. python -c 'import secrets; print(secrets.token_hex(32))')"
        )
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise JobEnvError(f"{what} must hold a hex key") from None
    if len(key) < 16:
        raise JobEnvError(f"{what} holds {len(key)} bytes; use at least 16 (32 recommended)")
    return key


def interface_address(name: str) -> str:
    """IPv4 address of a network interface (``--network-interface``)."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError as exc:
            raise JobEnvError(f"network interface {name!r} has no IPv4 address here: {exc.strerror}") from None
    return socket.inet_ntoa(packed[20:24])
