"""Shared fixtures for Plan C integration tests on the private cluster.

The cluster (test/cluster/planc-cluster) is brought up once per test
session; tests run Slurm's own client commands as the test users and assert
what those users would see.
"""
import os
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "test", "cluster", "planc-cluster")


def cluster_env():
    out = subprocess.run([CLUSTER, "env"], check=True, capture_output=True, text=True).stdout
    env = dict(os.environ)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip("'\"")
    return env


class Cluster:
    def __init__(self):
        self.env = cluster_env()
        self.dir = self.env.get("PLANC_CLUSTER_DIR",
                                os.environ.get("PLANC_CLUSTER_DIR", "/tmp/planc-cluster"))
        self.work = os.path.join(self.dir, "work")

    def run(self, *args, user=None, check=False, timeout=60, env=None):
        """Runs a command as `user` (None: root) with the cluster's environment."""
        cmd = list(args)
        if user:
            cmd = ["runuser", "-u", user, "--"] + cmd
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=env or self.env, check=check, cwd=self.work)

    def ctl(self, *args, check=True, timeout=180):
        return subprocess.run([CLUSTER] + list(args), capture_output=True, text=True,
                              timeout=timeout, check=check)

    def sbatch(self, *args, user=None):
        """Submits; returns (job id or None, CompletedProcess)."""
        p = self.run("sbatch", "--parsable", "-o", "/dev/null", *args, user=user)
        jobid = p.stdout.strip().split(";")[0] if p.returncode == 0 else None
        return jobid, p

    def squeue_field(self, jobid, fmt):
        p = self.run("squeue", "-h", "-j", jobid, "-o", fmt, check=True)
        return p.stdout.strip()

    def show_job(self, jobid):
        p = self.run("scontrol", "show", "job", "-o", jobid, check=True)
        fields = {}
        for tok in p.stdout.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                fields.setdefault(k, v)
        return fields

    def sacct_field(self, jobid, field):
        p = self.run("sacct", "-n", "-X", "-P", "-j", jobid, "-o", field, check=True)
        return p.stdout.strip()

    def wait_for(self, what, predicate, timeout=60, interval=0.5):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    def cancel_all(self):
        self.run("scancel", "--full", "-u", "pcalice")
        for u in ("pcalice", "pcbob", "pccarol", "root"):
            self.run("scancel", "-u", u)


@pytest.fixture(scope="session")
def cluster():
    up = subprocess.run([CLUSTER, "up"], capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        pytest.fail("planc-cluster up failed:\n" + up.stdout + up.stderr)
    c = Cluster()
    yield c
    if os.environ.get("PLANC_KEEP_CLUSTER") != "1":
        subprocess.run([CLUSTER, "down"], capture_output=True, text=True, timeout=300)
