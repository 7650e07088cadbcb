"""Job identity from each engine's environment, the build-mix verdict, host lists, handshake deadline."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from selector_backend.jobs import hosts, jobenv, rendezvous

from .native_helpers import source_module

buildmix = source_module("buildmix")  # the package's __init__ needs a built core


def test_torchrun_env() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "node1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}  # fmt: skip
    job = jobenv.discover(env)
    assert (job.rank, job.size, job.local_rank, job.local_size) == (3, 8, 1, 2)
    assert (job.host, job.port, job.serve_store) == ("node1", 29501, True)  # torchrun's agent holds 29500
    del env["TORCHELASTIC_RUN_ID"]
    assert jobenv.discover(env).port == 29500  # a Kubernetes pod: nothing else on MASTER_PORT


def test_slurm_env() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
           "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77", "SLURM_STEP_NODELIST": "gpu[07-09],login1",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2),2"}  # fmt: skip
    job = jobenv.discover(env)
    assert (job.rank, job.size, job.local_rank, job.local_size, job.host) == (5, 6, 1, 2, "gpu07")
    assert job.port == jobenv.discover(dict(env, SLURM_PROCID="0")).port  # every rank agrees
    assert jobenv.discover(dict(env, HVD_SELECTOR_RENDEZVOUS_ADDR="10.0.0.1:1234")).port == 1234


def test_mpi_envs() -> None:
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "HVD_SELECTOR_RENDEZVOUS_ADDR": "h0:4000"}  # fmt: skip
    job = jobenv.discover(ompi)
    assert (job.rank, job.size, job.host, job.port) == (1, 2, "h0", 4000)
    hydra = {"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    job = jobenv.discover(hydra)  # an MPI build needs no address; a Gloo build is told to export one
    assert (job.rank, job.size, job.local_size) == (0, 4, 2)
    with pytest.raises(jobenv.JobEnvError, match="HVD_SELECTOR_RENDEZVOUS_ADDR"):
        jobenv.require_address(job)


def test_bad_values_are_one_line_errors() -> None:
    with pytest.raises(jobenv.JobEnvError, match="RANK='x' must be an integer"):
        jobenv.discover({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"})
    with pytest.raises(jobenv.JobEnvError, match="MASTER_ADDR"):
        jobenv.discover({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(jobenv.JobEnvError, match="needs a shared secret"):
        jobenv.read_secret({}, "torchrun")
    with pytest.raises(jobenv.JobEnvError, match="at least 16"):
        jobenv.read_secret({"HVD_SELECTOR_SECRET": "abcd"}, "torchrun")
    assert jobenv.discover({}) is None


def _rec(rank: int, host: str, **kw: str) -> dict:
    base = {"rank": rank, "host": host, "release": "0.1.0", "wire": 1, "variant": "v", "target": "x86_64_v3",
            "tensor_ops": "gloo", "controllers": "gloo"}  # fmt: skip
    return {**base, **kw}


def test_verdict_allows_mixed_targets_and_names_offending_hosts() -> None:
    assert buildmix.verdict([_rec(0, "a"), _rec(1, "b", target="x86_64_v4", variant="w")]) == ""
    text = buildmix.verdict([_rec(0, "a"), _rec(1, "a"), _rec(2, "b", tensor_ops="mpi", controllers="mpi")])
    assert "tensor_ops differs: gloo on a (ranks 0,1) vs mpi on b (ranks 2)" in text
    assert "no gloo controller to join this rendezvous: rank 2 on b (mpi)" in text
    assert "release differs" in buildmix.verdict([_rec(0, "a"), _rec(1, "b", release="0.2.0")])
    mix = buildmix.format_mix([_rec(0, "a"), _rec(1, "b", target="x86_64_v4")])
    assert "a: ranks 0" in mix and "target=x86_64_v4" in mix and mix.endswith("compatible: yes")


def _exchange_all(records: list[dict]) -> list[object]:
    """Every rank runs buildmix.exchange through a real store at once; each one's result or error."""
    server = rendezvous.StoreServer(b"s" * 32).start()
    results: list[object] = [None] * len(records)

    def rank(r: int) -> None:
        client = rendezvous.StoreClient(*server.address, b"s" * 32, timeout=10)
        try:
            results[r] = buildmix.exchange(client.gather, records[r], len(records))
        except Exception as exc:  # compared by the test
            results[r] = exc
        finally:
            client.close()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(records))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    server.stop()
    return results


def test_every_rank_judges_the_same_build_records_in_one_gather() -> None:
    """No verdict from rank 0 any more: each rank reads every record in one gather and judges them
    itself, so a compatible job returns the same records everywhere and an incompatible one raises
    the same IncompatibleBuildsError on every rank."""
    good = [_rec(0, "a"), _rec(1, "a"), _rec(2, "b", target="x86_64_v4")]
    assert _exchange_all(good) == [good] * 3
    results = _exchange_all([_rec(0, "a"), _rec(1, "a"), _rec(2, "b", release="0.2.0")])
    assert all(isinstance(r, buildmix.IncompatibleBuildsError) for r in results), results
    assert len({str(r) for r in results}) == 1 and "release differs" in str(results[0])


def test_release_is_read_from_the_dist_info_beside_the_package(tmp_path) -> None:
    """An installed wheel's release comes from its own dist-info (one directory listing), not from
    importlib.metadata's scan of sys.path; a tree without one still answers."""
    import importlib.util

    (tmp_path / "hvd_selector").mkdir()
    copy = tmp_path / "hvd_selector" / "buildmix.py"
    copy.write_text(Path(buildmix.__file__).read_text())
    info = tmp_path / "hvd_selector-9.8.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.4\nName: hvd-selector\nVersion: 9.8.7\n\nbody\n")
    spec = importlib.util.spec_from_file_location("buildmix_installed", copy)
    assert spec is not None and spec.loader is not None
    installed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(installed)
    assert installed.release() == "9.8.7"
    assert buildmix.release() != "9.8.7"


def test_hosts_and_hostfile(tmp_path) -> None:
    assert hosts.parse_hosts("n1:2,n2") == [("n1", 2), ("n2", 1)]
    with pytest.raises(ValueError, match="1 <= slots"):
        hosts.parse_hosts("n1:0")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nn1 slots=2\nn2:3\n")
    assert hosts.read_hostfile(str(hostfile)) == [("n1", 2), ("n2", 3)]
    slots = hosts.assign(4, [("n1", 2), ("n2", 3)])
    assert [(s.rank, s.host, s.local_rank, s.local_size) for s in slots] == [
        (0, "n1", 0, 2), (1, "n1", 1, 2), (2, "n2", 0, 2), (3, "n2", 1, 2),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="more than the 5 slots"):
        hosts.assign(6, [("n1", 2), ("n2", 3)])


def test_handshake_has_one_overall_deadline() -> None:
    """A client dripping a byte at a time is cut off at the handshake deadline, not kept open."""
    server = rendezvous.StoreServer(b"s" * 32, handshake_timeout=1.0).start()
    try:
        sock = socket.create_connection(server.address, timeout=5)
        sock.recv(64)
        start = time.monotonic()
        closed = False
        for _ in range(30):  # bounded: 30 drips of 0.25 s
            try:
                sock.sendall(b"x")
                sock.settimeout(0.25)
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - start < 3.0
    finally:
        server.stop()


def test_run_help_states_the_launcher_s_numbers() -> None:
    """The --help text (written out, so --help stays cheap) says what the launcher does."""
    from selector_backend.cli.commands import run
    from selector_backend.jobs import launcher, output

    assert f"gives the other ranks {launcher.REPORT_SECONDS:g} s" in run.EPILOG
    assert f"(--grace-period, default {launcher.GRACE_SECONDS:g} s)" in run.EPILOG
    assert f"at most {output.CHUNK_BYTES >> 10} KiB per rank's" in run.EPILOG


def test_hosts_are_host_names_or_addresses() -> None:
    for good in ("node1", "gpu-07.cluster.example", "10.0.0.7", "login_1", "localhost"):
        assert hosts.check_host(good, "-H") == good
    for bad in ("-oProxyCommand=touch /tmp/x", "user@node1", "node1;rm", "", "a" * 300, "no de", "node\x00"):
        with pytest.raises(ValueError, match="is not a host name or IPv4 address"):
            hosts.check_host(bad, "-H")
    with pytest.raises(ValueError, match="more ranks than one job may have"):
        hosts.assign(10**20, None)
