"""Shared fixtures for Plan C integration tests on the private cluster.

The cluster (test/cluster/planc-cluster) is brought up once per test
session; tests run Slurm's own client commands as the test users and assert
what those users would see.
"""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "lib"))
from planc_test import CLUSTER, ROOT, Cluster  # noqa: E402,F401


def worker_overrides(overrides=None, offset=0):
    """Each pytest-xdist worker (gw0, gw1, ...) has clusters of its own: its
    own directory and ports (200 apart per worker), so workers run modules
    side by side without sharing a slurmctld, a database or a spool."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    n = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None
    base = int(os.environ.get("PLANC_PORT_BASE", "17800")) + offset
    d = os.environ.get("PLANC_CLUSTER_DIR", "/tmp/planc-cluster")
    out = dict(overrides or {})
    if n is not None:
        base += 200 * n
        d += f"-{worker}"
    if n is not None or offset:
        out.update({"PLANC_CLUSTER_DIR": d, "PLANC_PORT_BASE": str(base)})
    return out


def start_cluster(overrides=None):
    env = dict(os.environ, **(overrides or {}))
    up = subprocess.run([CLUSTER, "up"], capture_output=True, text=True, timeout=600, env=env)
    if up.returncode != 0:
        pytest.fail("planc-cluster up failed:\n" + up.stdout + up.stderr)
    return Cluster(overrides)


def stop_cluster(c):
    if os.environ.get("PLANC_KEEP_CLUSTER") != "1":
        subprocess.run([CLUSTER, "down", "--purge"], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, **c.overrides))


@pytest.fixture(scope="session")
def cluster():
    """The 4-node, 32-GPU cluster most tests share."""
    c = start_cluster(worker_overrides())
    yield c
    stop_cluster(c)


@pytest.fixture(scope="session")
def small_cluster():
    """A second, 1-node (8-GPU) cluster beside the first, for tests that need
    exactly one possible victim."""
    o = worker_overrides({"PLANC_NODES": "1"}, offset=100)
    o["PLANC_CLUSTER_DIR"] += "-1node"
    c = start_cluster(o)
    yield c
    stop_cluster(c)


# The longest modules first: pytest-xdist (--dist loadfile) hands each
# module to the next free worker in collection order, so a long module
# collected last would run alone at the end.
LONG_FIRST = ("test_replay.py", "test_billing.py", "test_infusion.py", "test_market.py",
              "test_market_life.py", "test_preempt.py", "test_failover.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = os.path.basename(str(item.fspath))
        return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)
    items.sort(key=rank)  # stable: the order within a module is kept
