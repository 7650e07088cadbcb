"""A throwaway cluster of "hosts": Linux network namespaces on one bridge, each with its own sshd.

The bridge lives in a namespace of its own, so the hosts reach each other and
nothing else (the root namespace gets no address on it). Every host runs
Debian's sshd with a per-cluster host key, client key and config under a
temporary directory; ``Cluster.close()`` kills what it started, by pid, and
deletes the namespaces.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.77.{n}"
_SERIAL = itertools.count()


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


@dataclass
class Host:
    name: str  # namespace
    address: str
    veth: str  # the host's end of its link (inside the namespace)
    sshd: subprocess.Popen[bytes] | None = None

    def pids(self) -> set[int]:
        out = sh("ip", "netns", "pids", self.name, check=False).stdout.split()
        return {int(p) for p in out}

    def exec_argv(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]


@dataclass
class Cluster:
    tag: str
    tmp: Path
    hosts: list[Host] = field(default_factory=list)
    switch: str = ""

    @property
    def ssh_config(self) -> Path:
        return self.tmp / "ssh_config"

    def leftover(self) -> dict[str, set[int]]:
        """Processes in each host other than its sshd listener (what a job must not leave behind)."""
        result = {}
        for h in self.hosts:
            mine = {h.sshd.pid} if h.sshd else set()
            rest = h.pids() - mine
            if rest:
                result[h.name] = rest
        return result

    def wait_clean(self, seconds: float) -> dict[str, set[int]]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.leftover():
                return {}
            time.sleep(0.2)
        return self.leftover()

    def kill_host(self, host: Host) -> None:
        """A host dies: every process in its namespace, sshd included."""
        _kill_all(host)
        if host.sshd:
            host.sshd.wait(10)

    def close(self) -> None:
        for h in self.hosts:
            _kill_all(h)
            if h.sshd and h.sshd.poll() is None:
                h.sshd.kill()
            if h.sshd:
                h.sshd.wait(10)
            sh("ip", "netns", "del", h.name, check=False)
        if self.switch:
            sh("ip", "netns", "del", self.switch, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _kill_all(host: Host) -> None:
    """SIGKILL every process in the host's namespace (all started by this cluster)."""
    for pid in host.pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {tmp}/host_key
AuthorizedKeysFile {tmp}/authorized_keys
PidFile {tmp}/sshd-{name}.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
ClientAliveInterval 1
ClientAliveCountMax 3
SetEnv SHLVL=1
"""
# sshd's own MaxStartups (10:30:100) and MaxSessions (10), as on a cluster's hosts: 16 ranks' ssh
# started at once on one host used to trip the first (selector_backend.jobs.ssh_connections).
# SHLVL=1: Debian's bash sources ~/.bashrc for a command sshd runs when SHLVL is unset or 0;
# this machine's root .bashrc runs `pyenv init -`, about 0.15 CPU-s per session and a third
# of these tests' CPU. The launcher passes what a rank needs (absolute paths, its environment).

SSH_CONFIG = """\
Host 10.77.*
  User root
  IdentityFile {tmp}/client_key
  IdentitiesOnly yes
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 5
"""


def create(count: int, tmp: Path, prefix: str = "mh") -> Cluster:
    """``count`` hosts 10.77.<n>.1.. on one bridge; sshd answering on each (names start with ``prefix``)."""
    serial = next(_SERIAL)  # several clusters may live at once (a shared one, a fresh one)
    tag = f"{prefix}{os.getpid() % 100000}c{serial}"
    n = (os.getpid() + 17 * serial) % 250
    cluster = Cluster(tag, tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        for key in ("host_key", "client_key"):
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key))
        shutil.copy(tmp / "client_key.pub", tmp / "authorized_keys")
        cluster.ssh_config.write_text(SSH_CONFIG.format(tmp=tmp))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        cluster.switch = f"{tag}sw"
        sh("ip", "netns", "add", cluster.switch)
        sh("ip", "-n", cluster.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", cluster.switch, "link", "set", "br0", "up")
        for i in range(count):
            host = Host(f"{tag}h{i}", SUBNET.format(n=n) + f".{i + 1}", "eth0")
            sh("ip", "netns", "add", host.name)
            cluster.hosts.append(host)
            sw_end = f"p{i}"
            sh("ip", "link", "add", f"{tag}a{i}", "type", "veth", "peer", "name", f"{tag}b{i}")
            sh("ip", "link", "set", f"{tag}a{i}", "netns", host.name)
            sh("ip", "link", "set", f"{tag}b{i}", "netns", cluster.switch)
            sh("ip", "-n", host.name, "link", "set", f"{tag}a{i}", "name", host.veth)
            sh("ip", "-n", cluster.switch, "link", "set", f"{tag}b{i}", "name", sw_end)
            sh("ip", "-n", cluster.switch, "link", "set", sw_end, "master", "br0", "up")
            sh("ip", "-n", host.name, "addr", "add", f"{host.address}/24", "dev", host.veth)
            sh("ip", "-n", host.name, "link", "set", host.veth, "up")
            sh("ip", "-n", host.name, "link", "set", "lo", "up")
            cfg = tmp / f"sshd-{host.name}.conf"
            cfg.write_text(SSHD_CONFIG.format(address=host.address, tmp=tmp, name=host.name))
            host.sshd = subprocess.Popen(
                host.exec_argv("/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)),
                stdout=subprocess.DEVNULL,
                stderr=open(tmp / f"sshd-{host.name}.log", "wb"),  # noqa: SIM115 (lives as long as sshd)
            )
        for host in cluster.hosts:  # bounded wait for every sshd to answer
            deadline = time.monotonic() + 15
            while True:
                probe = sh(
                    *cluster.hosts[0].exec_argv("ssh", "-F", str(cluster.ssh_config), host.address, "true"),
                    check=False,
                )
                if probe.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    log = (tmp / f"sshd-{host.name}.log").read_text(errors="replace")
                    raise RuntimeError(f"sshd on {host.name} did not answer: {probe.stderr} {log}")
                time.sleep(0.2)
    except BaseException:
        cluster.close()
        raise
    return cluster
