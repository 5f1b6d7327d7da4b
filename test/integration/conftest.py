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
    c = start_cluster()
    yield c
    stop_cluster(c)


@pytest.fixture(scope="session")
def small_cluster():
    """A second, 1-node (8-GPU) cluster beside the first, for tests that need
    exactly one possible victim."""
    base = int(os.environ.get("PLANC_PORT_BASE", "17800")) + 100
    d = os.environ.get("PLANC_CLUSTER_DIR", "/tmp/planc-cluster") + "-1node"
    c = start_cluster({"PLANC_CLUSTER_DIR": d, "PLANC_PORT_BASE": str(base), "PLANC_NODES": "1"})
    yield c
    stop_cluster(c)
