"""Shared fixtures for Plan C integration tests on the private cluster.

The cluster (test/cluster/planc-cluster) is brought up once per test
session; tests run Slurm's own client commands as the test users and assert
what those users would see.
"""
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from planc_env import cluster_env  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "test", "cluster", "planc-cluster")


class Cluster:
    def __init__(self, overrides=None):
        self.overrides = overrides or {}
        self.env = cluster_env(self.overrides)
        self.dir = self.env.get("PLANC_CLUSTER_DIR", "/tmp/planc-cluster")
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
                              timeout=timeout, check=check,
                              env=dict(os.environ, **self.overrides))

    def set_planc_conf(self, extra_lines):
        """Rewrites planc.conf as the example plus `extra_lines` (replacing
        keys they set) and restarts slurmctld so the plugins read it."""
        self.write_planc_conf(extra_lines)
        self.ctl("restart-ctld")

    def write_planc_conf(self, extra_lines, raw=None):
        """Writes planc.conf as the example plus `extra_lines` (replacing
        keys they set), or `raw` text as it is; no restart."""
        path = os.path.join(self.dir, "etc", "planc.conf")
        if raw is not None:
            with open(path + ".new", "w") as f:
                f.write(raw)
            os.replace(path + ".new", path)
            return path
        src = os.path.join(ROOT, "etc", "planc.conf.example")
        extra = [l for l in extra_lines if l.strip()]
        keys = {l.split("=", 1)[0].strip().lower() for l in extra if not l.startswith("Tier=")}
        tiers = {l.split()[0].lower() for l in extra if l.startswith("Tier=")}
        out = []
        for line in open(src).read().splitlines():
            k = line.split("=", 1)[0].strip().lower() if "=" in line else None
            if k in keys or (line.startswith("Tier=") and line.split()[0].lower() in tiers):
                continue
            out.append(line)
        return self.write_planc_conf(None, raw="\n".join(out + extra) + "\n")

    def write_script(self, name, body):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o755)
        return path

    def state(self, jobid):
        p = self.run("squeue", "-h", "-j", jobid, "-o", "%T")
        return p.stdout.strip() or "GONE"

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
        """Cancels every job and waits until no job holds a node."""
        for u in ("pcalice", "pcbob", "pccarol", "root"):
            self.run("scancel", "-u", u)
        self.wait_for("an empty queue",
                      lambda: self.run("squeue", "-h", "-o", "%i").stdout.strip() == "",
                      timeout=90)


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
