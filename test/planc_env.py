"""The client environment of a private Plan C cluster, for the Python tools
and tests: `planc-cluster env` prints `export K=V` lines; this turns them
into an environment for subprocess."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "test", "cluster", "planc-cluster")


def cluster_env(overrides=None):
    """os.environ plus `overrides` (PLANC_CLUSTER_DIR, ...) plus the
    cluster's exports (SLURM_CONF, PG*)."""
    env = dict(os.environ, **(overrides or {}))
    out = subprocess.run([CLUSTER, "env"], check=True, capture_output=True, text=True,
                         env=env).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip("'\"")
    return env
