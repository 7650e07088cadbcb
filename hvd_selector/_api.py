"""Horovod's Python API over the native core (hvd_selector._core).

Results come back as the input's array type: numpy in, numpy out; a torch
tensor (or any object with ``new_empty``) in, the same framework out — the
output is allocated by the input's own framework and filled through DLPack.
"""

from __future__ import annotations

import atexit
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from selector_backend.jobs import elastic_protocol, jobenv
from selector_backend.jobs.build_facts import BuildFacts
from selector_backend.jobs.rendezvous import LocalStore, RendezvousError, StoreClient, StoreServer

from . import _core, _jobcheck, buildmix

Sum = 0
Average = 1
Min = 2
Max = 3
Product = 4

HorovodInternalError = _core.HorovodInternalError
MismatchError = _core.MismatchError
CollectiveTimeoutError = _core.CollectiveTimeoutError
PeerFailureError = _core.PeerFailureError
UnavailableError = _core.UnavailableError
NotInitializedError = _core.NotInitializedError

DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "HVD_SELECTOR_TIMEOUT"
MPI_RANK_ENVS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MPI_LOCALRANKID")

_facts: BuildFacts | None = None
_generation = 0
_elastic_generation = 0  # the launcher's generation this worker last joined (elastic jobs)
_gpu_checked = False
_store_server: StoreServer | None = None
_job_builds: list[dict[str, Any]] = []


def _set_facts(facts: BuildFacts) -> None:
    global _facts
    _facts = facts


def timeout() -> float:
    """Seconds a rank waits for its peers (env HVD_SELECTOR_TIMEOUT, default 60)."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} must be a positive number of seconds")
    return value


def _data_address(job: jobenv.JobEnv, client: StoreClient) -> str:
    """The address this rank's data connections (the core's TCP mesh) listen on: asked for, or the one that
    reaches the store."""
    if os.environ.get("HVD_SELECTOR_HOSTNAME", "").strip():
        return os.environ["HVD_SELECTOR_HOSTNAME"].strip()
    if os.environ.get("HVD_SELECTOR_IFACE", "").strip():
        return jobenv.interface_address(os.environ["HVD_SELECTOR_IFACE"].strip())
    if job.host in ("127.0.0.1", "localhost"):
        return "127.0.0.1"
    return str(client.local_address())


def _join_gloo(job: jobenv.JobEnv, secret: bytes, wait: float, generation: int | None = None) -> None:
    """Rendezvous through the store (rank 0 serves it when no launcher does), then connect the TCP mesh.

    The store's keys carry the generation: this process's count of joins, or the elastic launcher's
    ``generation``, which every worker of that generation shares (new workers have joined fewer times).
    """
    global _generation, _store_server, _job_builds, _rendezvous
    assert _facts is not None
    jobenv.require_address(job)
    _generation = _generation + 1 if generation is None else generation
    if job.serve_store and job.rank == 0 and _store_server is None:
        bind = os.environ.get(jobenv.BIND_ENV, "").strip() or job.host
        try:
            _store_server = StoreServer(
                secret, host=bind, port=job.port, handshake_timeout=min(wait, 10.0), clients=job.size
            ).start()
        except OSError as exc:
            raise RendezvousError(
                f"rank 0 cannot serve the rendezvous on {bind}:{job.port} ({job.source}): {exc.strerror or exc}; "
                f"set {jobenv.BIND_ENV} to a local address or {jobenv.PORT_ENV} to a free port"
            ) from None
    client = StoreClient(job.host, job.port, secret, wait, prefix=f"g{_generation}/", retry_refused=job.serve_store)
    try:
        address = _data_address(job, client)
        name = os.environ.get("HVD_SELECTOR_HOST", "").strip() or socket.gethostname()
        if address not in ("127.0.0.1", name):
            name = f"{name} ({address})"
        try:
            _job_builds = buildmix.exchange(client.gather, buildmix.record(_facts, job.rank, name), job.size)
        except buildmix.IncompatibleBuildsError:
            raise
        except RendezvousError as exc:
            if "timed out" in str(exc):  # a missing rank: the same error as a missing peer later
                raise CollectiveTimeoutError(str(exc)) from None
            raise
        # The core's data connections prove the secret to each other (HMAC handshake) before any data crosses them.
        _core.init_gloo(
            job.rank,
            job.size,
            job.local_rank,
            job.local_size,
            client.set,
            client.get,
            address,
            wait,
            secret,
            gather_fn=client.gather,
        )
        _rendezvous = _Rendezvous(job.host, job.port, secret, f"g{_generation}/", address)
    finally:
        client.close()


@dataclass(frozen=True)
class _Rendezvous:
    """Where the Gloo ranks met, kept so process sets can meet there again."""

    host: str
    port: int
    key: bytes
    prefix: str
    hostname: str
    local: LocalStore | None = None


_rendezvous: _Rendezvous | None = None


ELASTIC_SOURCE = "hvd-selector run (elastic)"


def _control_client(wait: float) -> tuple[StoreClient, bytes, str]:
    """A connection to the elastic launcher's control store, its secret and this worker's name there."""
    host, port = jobenv.parse_address(os.environ[elastic_protocol.ELASTIC_ENV], elastic_protocol.ELASTIC_ENV)
    control_secret = jobenv.read_secret(os.environ, ELASTIC_SOURCE)
    worker = os.environ.get(elastic_protocol.WORKER_ENV, "").strip()
    if not worker:
        raise jobenv.JobEnvError(f"{elastic_protocol.ELASTIC_ENV} is set but {elastic_protocol.WORKER_ENV} is not")
    return StoreClient(host, port, control_secret, wait), control_secret, worker


def _join_elastic(wait: float) -> None:
    """Wait for the launcher's next generation that holds this worker, then join its store and mesh."""
    global _elastic_generation
    after = _elastic_generation or jobenv.int_env(os.environ, elastic_protocol.FIRST_GENERATION_ENV, 1) - 1
    client, control_secret, worker = _control_client(wait)
    try:
        client.get(elastic_protocol.assignment_key(after + 1, worker))  # blocks until that generation exists
        generation = max(after + 1, int(client.get(elastic_protocol.CURRENT_KEY)))  # skip to the newest
        data = client.get(elastic_protocol.assignment_key(generation, worker))
    finally:
        client.close()
    placed = elastic_protocol.Assignment.from_json(data)
    host, port = jobenv.parse_address(placed.rendezvous, "the elastic generation's rendezvous")
    job = jobenv.JobEnv(
        ELASTIC_SOURCE, placed.rank, placed.size, placed.local_rank, placed.local_size, host, port, False
    )
    _elastic_generation = placed.generation
    secret = elastic_protocol.unwrap_secret(control_secret, placed.generation, worker, placed.secret)
    _join_gloo(job, secret, wait, placed.generation)


def elastic_hosts_updated() -> bool:
    """True on an elastic worker when the launcher has made a newer generation than the one it runs in."""
    if not os.environ.get(elastic_protocol.ELASTIC_ENV, "").strip() or not _elastic_generation:
        return False
    client = _control_client(timeout())[0]
    try:
        return int(client.get(elastic_protocol.CURRENT_KEY)) > _elastic_generation
    finally:
        client.close()


def init() -> None:
    """Join the job: through the launcher's rendezvous, MPI, torchrun/Slurm's environment, or alone (size 1)."""
    global _rendezvous
    if _core.initialized():
        return
    assert _facts is not None
    wait = timeout()
    controllers = _facts.controllers
    if os.environ.get(elastic_protocol.ELASTIC_ENV, "").strip():
        _join_elastic(wait)
        return
    job = jobenv.discover(os.environ)
    under_mpi = any(name in os.environ for name in MPI_RANK_ENVS)
    if job is not None and job.source == "hvd-selector run":
        # A build without a gloo controller still reports to the store, so the job fails fast naming it.
        _join_gloo(job, jobenv.read_secret(os.environ, job.source), wait)
    elif "mpi" in controllers and (under_mpi or "gloo" not in controllers):
        _rendezvous = None
        _core.init_mpi(wait)
        _jobcheck.refuse_split_job(job, _facts)  # torchrun or the other MPI's mpiexec: one rank per job
    elif job is not None and job.size > 1 and "gloo" in controllers:
        _join_gloo(job, jobenv.read_secret(os.environ, job.source), wait)
    elif "gloo" in controllers:
        store = LocalStore()
        _rendezvous = _Rendezvous("", 0, b"", "", "127.0.0.1", store)
        _core.init_gloo(0, 1, 0, 1, store.set, store.get, "127.0.0.1", wait, b"")
    else:
        raise ValueError(f"no controller in this build can start here (controllers={','.join(controllers)})")


def job_builds() -> list[dict[str, Any]]:
    """Every rank's build as exchanged at init() (empty for MPI and single-rank jobs)."""
    return list(_job_builds)


def _no_store(*args: Any) -> bytes:
    raise RuntimeError("the MPI build creates process sets without the rendezvous store")


def _connect_process_set(set_id: int, ranks: Sequence[int], seq: int) -> None:
    """Build process set `set_id`'s communicator on this rank (a member).

    Gloo members meet again through the launcher's authenticated store under
    a key prefix of their own (`seq` numbers the registrations, the same on
    every rank); MPI members create a communicator of the group.
    """
    members = [int(r) for r in ranks]
    rv = _rendezvous
    if rv is None:  # MPI: the group's communicator needs no store
        _core.add_process_set(set_id, members, _no_store, _no_store, "", timeout(), b"")
        return
    tag = f"ps{seq}-" + "-".join(map(str, members)) + "/"
    if rv.local is not None:
        local = rv.local
        _core.add_process_set(
            set_id,
            members,
            lambda k, v: local.set(tag + k, v),
            lambda k, t: local.get(tag + k, t),
            rv.hostname,
            timeout(),
            b"",
        )
        return
    client = StoreClient(rv.host, rv.port, rv.key, timeout(), prefix=rv.prefix + tag)
    try:
        _core.add_process_set(
            set_id, members, client.set, client.get, rv.hostname, timeout(), rv.key, gather_fn=client.gather
        )
    finally:
        client.close()


def shutdown() -> None:
    """Leave the job and free the communicator (safe to call twice)."""
    global _store_server
    if _core.initialized():
        _core.finalize()
    if _store_server is not None:
        _store_server.stop()
        _store_server = None


atexit.register(shutdown)


def is_initialized() -> bool:
    return bool(_core.initialized())


def _identity(value: int) -> int:
    if not _core.initialized():
        raise NotInitializedError("hvd_selector has not been initialised; call hvd_selector.init() first")
    return value


def rank() -> int:
    return _identity(_core.rank())


def size() -> int:
    return _identity(_core.size())


def local_rank() -> int:
    return _identity(_core.local_rank())


def local_size() -> int:
    return _identity(_core.local_size())


# ----------------------------------------------------------------- arrays
def _check(tensor: Any, what: str) -> Any:
    if isinstance(tensor, np.ndarray):
        return tensor
    if hasattr(tensor, "__dlpack__"):
        detach = getattr(tensor, "detach", None)
        return detach() if callable(detach) else tensor
    raise TypeError(
        f"{what}: expected a numpy array or a DLPack tensor (torch.Tensor ...), got {type(tensor).__name__}"
    )


def _on_gpu(tensor: Any) -> bool:
    return bool(getattr(tensor, "is_cuda", False))


def _empty(like: Any, shape: Sequence[int]) -> Any:
    if isinstance(like, np.ndarray):
        if shape is like.shape:
            return np.empty_like(like, order="C")
        return np.empty(tuple(shape), dtype=like.dtype)
    new_empty = getattr(like, "new_empty", None)
    if callable(new_empty):
        return new_empty(tuple(int(s) for s in shape))
    return np.empty(tuple(shape), dtype=np.from_dlpack(like).dtype)


def _copy(tensor: Any) -> Any:
    if isinstance(tensor, np.ndarray):
        return tensor.copy()
    clone = getattr(tensor, "clone", None)
    return clone() if callable(clone) else np.array(np.from_dlpack(tensor), copy=True)


def _gpu_guard(tensor: Any) -> None:
    """Check the GPU's compute capability against the build's cuda_arch once."""
    global _gpu_checked
    if _gpu_checked or not _on_gpu(tensor):
        return
    reason = _core.gpu_unavailable_reason()
    assert _facts is not None
    if reason and "nccl" not in _facts.axis("tensor_ops"):
        from ._guard import reinstall_command

        reason += f"; install the GPU build: {reinstall_command(('selector=gpu-nvidia',))}"
    if reason:
        raise UnavailableError(f"GPU operations unavailable: {reason}")
    cc = _core.gpu_compute_capability(-1)  # the device this rank's communicator uses
    from ._guard import check_gpu

    check_gpu(_facts.cuda_archs, f"{cc // 10}.{cc % 10}")
    _gpu_checked = True


def _check_op(op: int) -> int:
    if op not in (Sum, Average, Min, Max, Product):
        raise ValueError(f"unknown op {op!r}; use hvd_selector.Sum, Average, Min, Max or Product")
    return int(op)


# ----------------------------------------------------------------- collectives
def allreduce(
    tensor: Any, op: int = Average, prescale_factor: float = 1.0, postscale_factor: float = 1.0, name: str | None = None
) -> Any:
    """Reduce across ranks; every rank gets postscale * op(prescale * tensor)."""
    tensor = _check(tensor, "allreduce")
    _gpu_guard(tensor)
    out = _empty(tensor, tensor.shape)  # CPU or GPU: the core reads tensor and writes out
    _core.allreduce(tensor, out, _check_op(op), float(prescale_factor), float(postscale_factor))
    return out


def allreduce_(
    tensor: Any, op: int = Average, prescale_factor: float = 1.0, postscale_factor: float = 1.0, name: str | None = None
) -> Any:
    """In-place allreduce (Horovod's ``allreduce_``): no output allocation; returns ``tensor``."""
    tensor = _check(tensor, "allreduce_")
    _gpu_guard(tensor)
    _core.allreduce(tensor, tensor, _check_op(op), float(prescale_factor), float(postscale_factor))
    return tensor


def grouped_allreduce(
    tensors: Sequence[Any],
    op: int = Average,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    name: str | None = None,
) -> list[Any]:
    """Allreduce many tensors through fusion buffers (see fusion_threshold())."""
    # numpy arrays of one dtype: results are views of one flat array the core
    # reduces in place, and no Python code runs per tensor (None: other input).
    if not isinstance(tensors, (list, tuple)):
        tensors = list(tensors)  # read once, whichever path takes it
    outs = _core.grouped_allreduce_numpy(
        tensors, np.ndarray, np.empty, _check_op(op), float(prescale_factor), float(postscale_factor)
    )
    if outs is not None:
        return outs
    ins = [t if type(t) is np.ndarray else _check(t, "grouped_allreduce") for t in tensors]
    on_gpu = next((t for t in ins if type(t) is not np.ndarray and _on_gpu(t)), None)
    if on_gpu is not None:
        _gpu_guard(on_gpu)
    if all(type(t) is np.ndarray for t in ins):  # the common case, kept cheap per tensor
        outs = [np.empty_like(t, order="C") for t in ins]
    else:
        outs = [_empty(t, t.shape) for t in ins]
    _core.grouped_allreduce(ins, outs, _check_op(op), float(prescale_factor), float(postscale_factor))
    return outs


def allgather(tensor: Any, name: str | None = None) -> Any:
    """Concatenate every rank's tensor along dim 0 (its size may differ per rank)."""
    tensor = _check(tensor, "allgather")
    _gpu_guard(tensor)
    dims = _core.allgather_prepare(tensor)
    out = _empty(tensor, (sum(dims), *tuple(tensor.shape)[1:]))
    _core.allgather(tensor, out, dims)
    return out


def broadcast(tensor: Any, root_rank: int, name: str | None = None) -> Any:
    """root_rank's tensor, on every rank (a new tensor; the input is untouched)."""
    tensor = _check(tensor, "broadcast")
    _gpu_guard(tensor)
    out = _copy(tensor)
    _core.broadcast(out, int(root_rank))
    return out


def alltoall(tensor: Any, splits: Sequence[int] | None = None, name: str | None = None) -> Any:
    """Send splits[i] rows (dim 0) to rank i; returns what the others sent, in rank order.

    ``splits=None`` divides dim 0 evenly (it must be divisible by size()).
    """
    tensor = _check(tensor, "alltoall")
    _gpu_guard(tensor)
    n = size()
    rows = int(tensor.shape[0]) if len(tensor.shape) else 0
    if splits is None:
        if len(tensor.shape) == 0 or rows % n:
            raise ValueError(f"alltoall: dim 0 ({rows}) is not divisible by size() ({n}); pass splits=")
        split_list = [rows // n] * n
    else:
        split_list = [int(s) for s in (splits.tolist() if hasattr(splits, "tolist") else splits)]
        if len(split_list) != n:
            raise ValueError(f"alltoall: splits has {len(split_list)} entries but there are {n} ranks")
    recv = _core.alltoall_prepare(tensor, split_list)
    out = _empty(tensor, (sum(recv), *tuple(tensor.shape)[1:]))
    _core.alltoall(tensor, split_list, out, recv)
    return out


def barrier() -> None:
    """Wait until every rank reaches the barrier."""
    _core.barrier()


def fusion_threshold() -> int:
    """Bytes per fusion buffer (env HOROVOD_FUSION_THRESHOLD, default 64 MiB)."""
    return int(_core.fusion_threshold())


def set_fusion_threshold(nbytes: int) -> None:
    if nbytes < 0:
        raise ValueError("fusion threshold must be >= 0 bytes")
    _core.set_fusion_threshold(int(nbytes))
