"""Horovod's ``RayExecutor``: ranks as Ray actors, placed per host, meeting through hvd-selector's own store.

Ray places and watches the workers; hvd-selector does the rest as its launcher
does. ``start()`` makes a fresh job secret and serves the authenticated
rendezvous store (selector_backend.jobs.rendezvous) from the driver; each
actor gets its rank, the store's address and the secret as arguments of a Ray
call (Ray's own channel: nothing of ours is pickled over a network). The
ranks' collectives then run over the core's TCP mesh between hosts (shared
memory within one).

A worker that dies (its process killed, its node lost: Ray's
``RayActorError``) ends the job: the other ranks' collectives raise
PeerFailureError when their connections to it break, ``run()`` waits for them
a bounded time, stops every worker and raises one PeerFailureError naming the
rank that died. ``start()`` again makes a new job (new secret, new store).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError
    from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError as exc:
    raise ImportError(f"hvd_selector.ray needs Ray ({exc}); install it: pip install 'hvd-selector[ray]'") from None

from selector_backend.jobs import jobenv
from selector_backend.jobs.rendezvous import StoreServer

from ._api import PeerFailureError

REPORT_SECONDS = 5.0  # after a worker died, the others get timeout_s + this to end before they are stopped


@dataclass(frozen=True)
class RaySettings:
    """What ``RayExecutor.create_settings`` returns (Horovod's settings object, the parts that apply)."""

    timeout_s: int = 30  # the ranks' wait for a peer (HVD_SELECTOR_TIMEOUT)
    placement_group_timeout_s: int = 100  # how long start() waits for Ray to place the workers
    nics: frozenset[str] = field(default_factory=frozenset)  # the one interface the mesh uses, if named


class _Worker:
    """One rank: a Ray actor holding the job's identity in its environment and the user's executable."""

    def __init__(self) -> None:
        self.executable: Any = None

    def node_ip(self) -> str:
        return str(ray.util.get_node_ip_address())

    def pid(self) -> int:
        import os

        return os.getpid()

    def join(
        self,
        env: dict[str, str],
        executable_cls: type | None,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> None:
        """Take the job's identity (the secret among it) and build the executable; hvd.init() reads them."""
        import os

        os.environ.update(env)
        if executable_cls is not None:
            self.executable = executable_cls(*args, **kwargs)

    def execute(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self.executable)

    def run(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        return fn(*args, **kwargs)


@dataclass(frozen=True)
class _Rank:
    actor: Any
    rank: int
    host: str


ELASTIC = "elastic Ray jobs are not built yet; drop them for a fixed-size job"
CALLBACKS = "workers send no results to callbacks; use run_remote() and ray.wait() for progress"


def _unsupported(why: str, **given: Any) -> None:
    """A ValueError naming every argument given that hvd-selector cannot honour (never ignored)."""
    named = sorted(k for k, v in given.items() if v is not None)
    if named:
        raise ValueError(f"RayExecutor: {', '.join(named)} not supported by hvd-selector: {why}")


class RayExecutor:
    """Horovod's ``horovod.ray.RayExecutor``: ``start()``, ``run()``/``execute()``, ``shutdown()``."""

    @staticmethod
    def create_settings(
        timeout_s: int = 30,
        ssh_identity_file: str | None = None,
        ssh_str: str | None = None,
        placement_group_timeout_s: int = 100,
        nics: set[str] | None = None,
    ) -> RaySettings:
        """Horovod's settings: ``timeout_s`` bounds every wait for a peer; ssh is not used (Ray starts the
        workers)."""
        if ssh_identity_file is not None or ssh_str is not None:
            raise ValueError(
                "RayExecutor.create_settings: ssh_identity_file/ssh_str do not apply (Ray starts the ranks)"
            )
        if timeout_s <= 0 or placement_group_timeout_s <= 0:
            raise ValueError("RayExecutor.create_settings: timeout_s and placement_group_timeout_s must be > 0")
        if nics is not None and len(nics) > 1:
            raise ValueError(
                f"RayExecutor.create_settings: nics={sorted(nics)}: hvd-selector's mesh uses one interface"
            )
        return RaySettings(timeout_s, placement_group_timeout_s, frozenset(nics or ()))

    def __init__(
        self,
        settings: RaySettings,
        num_workers: int | None = None,
        num_hosts: int | None = None,
        num_workers_per_host: int = 1,
        cpus_per_worker: int = 1,
        use_gpu: bool = False,
        gpus_per_worker: int | None = None,
        use_current_placement_group: bool = True,
        min_workers: int | None = None,
        max_workers: int | None = None,
        reset_limit: int | None = None,
        cooldown_range: tuple[int, int] | None = None,
        elastic_timeout: int = 1200,
        override_discovery: bool = True,
    ) -> None:
        _unsupported(
            ELASTIC,
            min_workers=min_workers,
            max_workers=max_workers,
            reset_limit=reset_limit,
            cooldown_range=cooldown_range,
            elastic_timeout=None if elastic_timeout == 1200 else elastic_timeout,
            override_discovery=None if override_discovery else override_discovery,
        )
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("RayExecutor: give either num_workers, or num_hosts with num_workers_per_host")
        count = num_workers if num_workers is not None else num_hosts
        assert count is not None
        if count < 1 or num_workers_per_host < 1 or cpus_per_worker < 0:
            raise ValueError("RayExecutor: num_workers/num_hosts and num_workers_per_host must be >= 1")
        self.settings = settings
        self.use_current_placement_group = use_current_placement_group
        self.num_hosts = num_hosts
        self.per_host = num_workers_per_host if num_hosts is not None else 1
        self.num_workers = count * self.per_host
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self._ranks: list[_Rank] = []
        self._group: PlacementGroup | None = None
        self._store: StoreServer | None = None

    # -- start ------------------------------------------------------------------------------------------------

    def _place(self) -> tuple[PlacementGroup, list[int]]:
        """A placement group (one bundle per host: STRICT_SPREAD, or one per worker: PACK); each worker's bundle."""
        worker = {"CPU": float(self.cpus_per_worker)} | (
            {"GPU": float(self.gpus_per_worker)} if self.gpus_per_worker else {}
        )
        if self.num_hosts is not None:
            bundles = [{k: v * self.per_host for k, v in worker.items()} for _ in range(self.num_hosts)]
            group = placement_group(bundles, strategy="STRICT_SPREAD")
            index = [i // self.per_host for i in range(self.num_workers)]
        else:
            group = placement_group([dict(worker) for _ in range(self.num_workers)], strategy="PACK")
            index = list(range(self.num_workers))
        try:
            ray.get(group.ready(), timeout=self.settings.placement_group_timeout_s)
        except GetTimeoutError:
            remove_placement_group(group)
            where = f"{self.num_hosts} hosts x {self.per_host}" if self.num_hosts is not None else f"{self.num_workers}"
            raise TimeoutError(
                f"RayExecutor.start: Ray could not place {where} workers ({worker} each) within "
                f"{self.settings.placement_group_timeout_s}s; check `ray status` for free resources"
            ) from None
        return group, index

    def _bind_address(self) -> str:
        if self.settings.nics:
            return jobenv.interface_address(next(iter(self.settings.nics)))
        return str(ray.util.get_node_ip_address())

    def start(
        self,
        executable_cls: type | None = None,
        executable_args: Sequence[Any] | None = None,
        executable_kwargs: dict[str, Any] | None = None,
        extra_env_vars: dict[str, str] | None = None,
    ) -> None:
        """Place the workers, serve a fresh rendezvous, give every worker its rank, the store and the secret."""
        if self._ranks:
            raise RuntimeError("RayExecutor.start: already started; call shutdown() first")
        if self.use_current_placement_group and ray.util.get_current_placement_group() is not None:
            raise ValueError(
                "RayExecutor.start: called inside a placement group (a Ray Tune trial?); hvd-selector places its "
                "workers in a group of its own: pass use_current_placement_group=False"
            )
        group, index = self._place()
        self._group = group
        try:
            remote: Any = ray.remote(_Worker)  # Ray's actor types do not follow .options()
            actors = [
                remote.options(
                    num_cpus=self.cpus_per_worker,
                    num_gpus=self.gpus_per_worker,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=b),
                ).remote()
                for b in index
            ]
            self._ranks = [_Rank(a, -1, "") for a in actors]  # stopped by shutdown() if what follows fails
            ips = ray.get([a.node_ip.remote() for a in actors], timeout=self.settings.placement_group_timeout_s)
            # ranks by host, in the order hosts first appear: a host's ranks are consecutive (local ranks 0..n-1)
            hosts = list(dict.fromkeys(ips))
            order = sorted(range(len(actors)), key=lambda i: (hosts.index(ips[i]), i))
            self._ranks = [_Rank(actors[i], r, ips[i]) for r, i in enumerate(order)]
            secret = secrets.token_bytes(32)
            self._store = StoreServer(secret, host=self._bind_address(), clients=self.num_workers).start()
            address = f"{self._store.address[0]}:{self._store.address[1]}"
            joins = []
            for r in self._ranks:
                same = [x for x in self._ranks if x.host == r.host]
                env = dict(extra_env_vars or {}) | {
                    "HVD_SELECTOR_RANK": str(r.rank),
                    "HVD_SELECTOR_SIZE": str(self.num_workers),
                    "HVD_SELECTOR_LOCAL_RANK": str(same.index(r)),
                    "HVD_SELECTOR_LOCAL_SIZE": str(len(same)),
                    "HVD_SELECTOR_RENDEZVOUS": address,
                    "HVD_SELECTOR_TIMEOUT": str(self.settings.timeout_s),
                    "HVD_SELECTOR_HOST": r.host,
                    jobenv.SECRET_ENV: secret.hex(),
                }
                if self.settings.nics:
                    env["HVD_SELECTOR_IFACE"] = next(iter(self.settings.nics))
                joins.append(
                    r.actor.join.remote(env, executable_cls, list(executable_args or ()), dict(executable_kwargs or {}))
                )
            ray.get(joins)
        except BaseException:
            self.shutdown()
            raise

    # -- run --------------------------------------------------------------------------------------------------

    def _started(self, what: str) -> list[_Rank]:
        if not self._ranks:
            raise RuntimeError(f"RayExecutor.{what}: not started; call start() first")
        return self._ranks

    def run_remote(
        self, fn: Callable[..., Any], args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        """``fn(*args, **kwargs)`` on every worker; Ray's ObjectRefs, by rank (no failure handling: ray.get them)."""
        return [r.actor.run.remote(fn, list(args or ()), dict(kwargs or {})) for r in self._started("run_remote")]

    def run(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        callbacks: Sequence[Callable[..., Any]] | None = None,
    ) -> list[Any]:
        """``fn(*args, **kwargs)`` on every worker; the results by rank."""
        _unsupported(CALLBACKS, callbacks=callbacks)
        self._started("run")
        return self._gather(self.run_remote(fn, args, kwargs))

    def execute(self, fn: Callable[[Any], Any], callbacks: Sequence[Callable[..., Any]] | None = None) -> list[Any]:
        """``fn(executable)`` on every worker (the ``executable_cls`` instance start() made); results by rank."""
        _unsupported(CALLBACKS, callbacks=callbacks)
        return self._gather([r.actor.execute.remote(fn) for r in self._started("execute")])

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(executable)`` on rank 0 alone."""
        return ray.get(self._started("execute_single")[0].actor.execute.remote(fn))

    def _gather(self, refs: list[Any]) -> list[Any]:
        """Every rank's result; after a failure the others get a bounded time, then the job is stopped."""
        hosts = [r.host for r in self._ranks]
        pending = {ref: rank for rank, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        failed: dict[int, BaseException] = {}
        deadline: float | None = None
        while pending:
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait)
            for ref in ready:
                rank = pending.pop(ref)
                try:
                    results[rank] = ray.get(ref)
                except Exception as exc:  # a rank's failure, from Ray: reported below
                    failed[rank] = exc
            if failed and deadline is None:
                deadline = time.monotonic() + self.settings.timeout_s + REPORT_SECONDS
            if deadline is not None and time.monotonic() >= deadline:
                break
        if not failed:
            return results
        stuck = sorted(pending.values())
        self.shutdown()  # the job is broken: no worker keeps a half-joined mesh
        died = {r: e for r, e in failed.items() if isinstance(e, RayActorError)}
        if not died:
            raise failed[min(failed)]  # a rank's own exception (Ray's RayTaskError, an instance of its cause)
        first = min(died)
        others = sorted(r for r in failed if r != first)
        kinds = sorted({_cause_name(failed[r]) for r in others})
        text = f"rank {first} (Ray actor on {hosts[first]}) died: {_first_line(died[first])}"
        if others:
            text += f"; ranks {others} ended with {', '.join(kinds)}"
        if stuck:
            text += f"; ranks {stuck} did not end within {self.settings.timeout_s + REPORT_SECONDS:g}s and were stopped"
        raise PeerFailureError(text + "; the executor stopped its workers: start() again for a new job")

    # -- shutdown ---------------------------------------------------------------------------------------------

    def worker_hosts(self) -> list[str]:
        """Each rank's node address, by rank (empty before start())."""
        return [r.host for r in self._ranks]

    def shutdown(self) -> None:
        """Stop every worker, the store and the placement group (safe to call twice)."""
        for r in self._ranks:
            ray.kill(r.actor, no_restart=True)
        self._ranks = []
        if self._store is not None:
            self._store.stop()
            self._store = None
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None


def _cause_name(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    return type(cause if isinstance(cause, BaseException) else exc).__name__


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
