"""The Plan C test library: one place for what the integration tests, the
benchmarks and the timeline script share.

  cluster_env()        the client environment of a private cluster
                       (SLURM_CONF, PG*), from `planc-cluster env`
  Cluster              a private cluster as its users and admins use it:
                       commands as a user, squeue/scontrol/sacct fields,
                       planc.conf edits, waits
  wait_for()           wait on a condition, never a fixed sleep
  sdiag() / Sdiag      the scheduler's counters; Cluster.scheduler_looked()
                       waits until the main scheduler and backfill have
                       each run again, so "still pending" means a pass saw
                       the job and left it
  stat_name_cpu() ...  CPU time of processes and threads from /proc
"""
import os
import re
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def wait_for(what, predicate, timeout=60, interval=0.5):
    """Calls predicate() until it returns something true, which is
    returned; raises AssertionError naming `what` after `timeout` s."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# --- sdiag --------------------------------------------------------------------

class Sdiag:
    """Parsed `sdiag`: the main scheduler's and backfill's statistics."""

    def __init__(self, text):
        self.text = text
        self.main = self._section("Main schedule statistics")
        self.backfill = self._section("Backfilling stats")

    def _section(self, title):
        start = self.text.find(title)
        if start < 0:
            return {}
        block = self.text[start:].split("\n\n", 1)[0]
        return {k.strip(): int(v) for k, v in re.findall(r"^\s+([^:\n]+):\s+(\d+)\s*$", block,
                                                          re.M)}

    def main_cycles(self):
        return self.main.get("Total cycles", 0)

    def backfill_cycles(self):
        return self.backfill.get("Total cycles", 0)


def sdiag(env):
    return Sdiag(subprocess.run(["sdiag"], env=env, capture_output=True, text=True,
                                check=True).stdout)


# --- /proc ----------------------------------------------------------------------

def stat_name_cpu(path):
    """(name, user+system CPU seconds) from a /proc .../stat file."""
    with open(path) as f:
        head, rest = f.read().rsplit(")", 1)
    fields = rest.split()
    return (head.split("(", 1)[1],
            (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))


def process_cpu_seconds(pid):
    return stat_name_cpu(f"/proc/{pid}/stat")[1]


def thread_stats(pid):
    """A process's threads by name: (CPU seconds, voluntary and involuntary
    context switches), summed over threads of the same name."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name, cpu = stat_name_cpu(f"/proc/{pid}/task/{tid}/stat")
            vol = invol = 0
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for ln in f:
                    if ln.startswith("voluntary_ctxt_switches"):
                        vol = int(ln.split()[1])
                    elif ln.startswith("nonvoluntary_ctxt_switches"):
                        invol = int(ln.split()[1])
        except OSError:
            continue  # the thread ended meanwhile
        c, v, i = out.get(name, (0.0, 0, 0))
        out[name] = (c + cpu, v + vol, i + invol)
    return out


# --- pieces the benchmarks share -----------------------------------------------

# What Prometheus 2.x sends with a scrape.
PROMETHEUS_SCRAPE_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
              "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
    "User-Agent": "planc-bench",
}


def scrape_metrics(port, headers=PROMETHEUS_SCRAPE_HEADERS):
    """One scrape of 127.0.0.1:port/metrics as Prometheus makes it, on a
    fresh connection (prometheus-cpp's server closes it after each
    response): (seconds from connect to the body's last byte, HTTP status,
    the body as sent, the response's headers).  OSError when nothing
    listens."""
    import http.client
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics", headers=headers)
    r = c.getresponse()
    raw = r.read()
    dt = time.perf_counter() - t0
    c.close()
    return dt, r.status, raw, r.headers


def metrics_text(raw, headers):
    """A scrape's body as text, gunzipped when it came compressed."""
    import gzip
    return (gzip.decompress(raw) if headers.get("Content-Encoding") == "gzip" else raw).decode()


def percentile_nearest_rank(values, p):
    """The p-th percentile (nearest rank) of `values`."""
    import math
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100.0 * len(s)) - 1))]


def install_pool_script(cluster_dir, script):
    """A copy of a pool's batch script (etc/pools/serve.sh) where slurmctld
    trusts it: root's, in <cluster_dir>/pools, a directory only root may
    write.  Returns its path."""
    import shutil
    pool_dir = os.path.join(cluster_dir, "pools")
    os.makedirs(pool_dir, mode=0o755, exist_ok=True)
    os.chmod(pool_dir, 0o755)
    path = os.path.join(pool_dir, os.path.basename(script))
    shutil.copyfile(script, path)
    os.chmod(path, 0o755)
    return path


# --- the cluster ----------------------------------------------------------------

class Cluster:
    """A private cluster (test/cluster/planc-cluster) as users and admins
    use it."""

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

    PLUGINS = ("job_submit/planc", "preempt/planc", "jobcomp/planc", "slurmctld/planc")

    def reload_planc_conf(self, extra_lines):
        """Rewrites planc.conf as set_planc_conf() does, without a restart:
        waits until every plugin has logged that it reloaded the file."""
        offset = self.log_offset()
        path = self.write_planc_conf(extra_lines)
        self.wait_for("every plugin to reload planc.conf",
                      lambda: all(f"{p}: reloaded {path}" in self.log_since(offset)
                                  for p in self.PLUGINS), timeout=30)

    def write_planc_conf(self, extra_lines, raw=None):
        """Writes planc.conf as the example plus `extra_lines` (replacing
        keys they set), or `raw` text as it is; no restart."""
        path = os.path.join(self.dir, "etc", "planc.conf")
        if raw is None:
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
            raw = "\n".join(out + extra) + "\n"
        with open(path + ".new", "w") as f:
            f.write(raw)
        os.replace(path + ".new", path)
        return path

    def log_offset(self):
        """Where slurmctld's log ends now; pass it to log_since()."""
        return os.path.getsize(os.path.join(self.dir, "log", "slurmctld.log"))

    def log_since(self, offset):
        with open(os.path.join(self.dir, "log", "slurmctld.log"), errors="replace") as f:
            f.seek(offset)
            return f.read()

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
        return wait_for(what, predicate, timeout, interval)

    def sdiag(self):
        return sdiag(self.env)

    def scheduler_looked(self, main=2, backfill=1, timeout=60):
        """Waits until slurmctld's main scheduler has finished `main` more
        cycles and backfill `backfill` more, so a job still pending
        afterwards was looked at and left pending, not just not reached."""
        start = self.sdiag()
        m0, b0 = start.main_cycles(), start.backfill_cycles()
        self.wait_for(f"{main} main scheduler and {backfill} backfill cycles",
                      lambda: (lambda s: s.main_cycles() >= m0 + main and
                               s.backfill_cycles() >= b0 + backfill)(self.sdiag()),
                      timeout=timeout, interval=0.5)

    def end_now(self, jobid):
        """Ends a running job at once, to free its nodes: SIGKILL to its
        batch script (it ends FAILED).  `scancel` would have slurmd send
        SIGTERM and wait at least 5 s, which the test jobs that trap SIGTERM
        sit out."""
        p = self.run("scancel", "--batch", "--signal=KILL", jobid)
        assert p.returncode == 0, p.stderr

    def cancel_all(self):
        """Cancels every job and waits until no job holds a node.  Running
        jobs' batch scripts get SIGKILL first (`--batch`: slurmctld sends
        it as is; a plain `scancel --signal=KILL` becomes a job kill, which
        slurmd delivers as SIGTERM, KillWait, SIGKILL, so the test jobs
        that trap SIGTERM held their node 5 s).  A job requeued meanwhile
        (one that was in a preemption's grace) is cancelled on the next
        round."""
        users = ("pcalice", "pcbob", "pccarol", "pcpool", "pcops", "root")

        def cancelled():
            if self.run("squeue", "-h", "-o", "%i").stdout.strip() == "":
                return True
            for u in users:
                self.run("scancel", "--state=RUNNING", "--batch", "--signal=KILL", "-u", u)
            for u in users:
                self.run("scancel", "-u", u)
            return False
        self.wait_for("an empty queue", cancelled, timeout=90, interval=0.2)
