"""The import guard and the resolver apply one CPU rule (issue 9): same verdict on every pair.

No build needed: the guard module is loaded from the source tree and asked about a
host microarchitecture directly (its real-CPU reading is tested under qemu in
test_guard_and_info.py).
"""

from __future__ import annotations

import archspec.cpu
import pytest

from selector_backend.engine.catalog import load_catalog
from selector_backend.engine.compat import check_target
from selector_backend.engine.host import CpuInfo, HostProfile
from selector_backend.jobs.build_facts import BuildFacts

from .native_helpers import source_module

CATALOG_TARGETS = load_catalog().axes["target"].values
MICROARCHS = sorted(archspec.cpu.TARGETS)


def guard_accepts(target: str, host: str) -> bool:
    facts = BuildFacts("t", {"target": (target,)}, {})
    try:
        source_module("_guard").check_cpu(facts, host_target=host)
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("target", CATALOG_TARGETS)
def test_guard_verdict_equals_resolver_verdict_for_every_archspec_host(target: str) -> None:
    """Every (catalog target, archspec microarchitecture) pair, all families included."""
    disagree = []
    for host in MICROARCHS:
        resolver = check_target(target, HostProfile(cpu=CpuInfo.from_microarch(host))).ok
        if guard_accepts(target, host) is not resolver:
            disagree.append(host)
    assert disagree == []


@pytest.mark.parametrize(
    ("target", "host"),
    [("neoverse_v2", "neoverse_n2"), ("neoverse_n1", "m1"), ("neoverse_n1", "m4"), ("neoverse_v1", "olympus")],
)
def test_pairs_the_old_feature_subset_guard_accepted_are_refused(target: str, host: str) -> None:
    """Issue 9's examples: the host has every feature of the target, yet the target is
    no ancestor, so the resolver rejects it; the old feature-subset guard accepted it."""
    assert archspec.cpu.TARGETS[target].features <= archspec.cpu.TARGETS[host].features
    assert not check_target(target, HostProfile(cpu=CpuInfo.from_microarch(host))).ok
    assert not guard_accepts(target, host)
