"""planc-exporter on the private cluster: the pool's GPUs and jobs per tier as
Prometheus reads them, from the snapshot slurmctld/planc writes; a source
that is missing, corrupt or stale is down, never shown as current."""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import ROOT

EXPORTER = os.path.join(ROOT, "planc-exporter")
SAMPLE = re.compile(r'^(planc_[a-z0-9_]+)(\{[^}]*\})? (\S+)$')


@pytest.fixture
def c(cluster):
    if not os.access(EXPORTER, os.X_OK):
        pytest.fail(f"{EXPORTER} was not built: install prometheus-cpp-dev and run configure again")
    cluster.cancel_all()
    cluster.state_dir = os.path.join(cluster.dir, "state", "ctld")
    yield cluster
    cluster.cancel_all()


def wait_snapshots(c):
    """Each plugin writes its snapshot every 5 s once slurmctld has loaded its
    jobs.  Waits for one written after now from each: after a restart the
    files on disk are the ones from before, stale, and a test reading them
    would find a source down that is merely still starting."""
    t0 = time.time()
    for source in ("slurmctld", "preempt", "jobcomp"):
        path = os.path.join(c.state_dir, f"planc_metrics_{source}")
        c.wait_for(f"a {source} metrics snapshot written after the test began",
                   lambda: os.path.exists(path) and os.path.getmtime(path) > t0,
                   timeout=30, interval=0.2)


def fresh_metrics(c, source):
    """The metrics once `source` has written a snapshot after now: every job
    that ended before this call is in it."""
    path = os.path.join(c.state_dir, f"planc_metrics_{source}")
    t0 = time.time()
    c.wait_for(f"a {source} snapshot written after now",
               lambda: os.path.getmtime(path) > t0 + 0.01, timeout=30, interval=0.2)
    return metrics(c)


def parse(text):
    """{(name, '{labels}'): value} of a /metrics text."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def once(state_dir, *args):
    return subprocess.run([EXPORTER, "--once", "--state-dir", state_dir, *args],
                          capture_output=True, text=True, timeout=30)


def plugin_log(c, limit=40):
    """slurmctld's last lines from the Plan C plugins: what a stale source's
    plugin last said (its worker logs a late or long pass)."""
    try:
        with open(os.path.join(c.dir, "log", "slurmctld.log"), errors="replace") as f:
            lines = [line for line in f if "planc" in line]
    except OSError as e:
        return f"(slurmctld.log: {e})"
    return "".join(lines[-limit:])


def metrics(c):
    p = once(c.state_dir)
    assert p.returncode == 0, (p.stderr + "\nslurmctld.log, Plan C's lines:\n" + plugin_log(c)
                               + "\n" + p.stdout)
    return parse(p.stdout)


def db_conninfo(c, user="planc_exporter"):
    """planc-exporter's role (planc_metrics; planc-cluster maps root to it)."""
    return f"host={c.env['PGHOST']} port={c.env['PGPORT']} dbname=planc user={user}"


def start_exporter(c, *args):
    """A planc-exporter serving on a free loopback port: (process, scrape)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([EXPORTER, "--listen", f"127.0.0.1:{port}", "--state-dir",
                               c.state_dir, *args], stderr=subprocess.PIPE, text=True)

    def scrape():
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            return body.decode()
        except OSError:
            return None
    return server, scrape


def submit(c, user, account, qos, gpus):
    jobid, p = c.sbatch("-A", account, f"--qos={qos}", f"--gres=gpu:{gpus}", "--wrap", "sleep 300",
                        user=user)
    assert jobid, p.stderr
    return jobid


def test_pool_and_tiers_as_prometheus_reads_them(c):
    wait_snapshots(c)
    p0 = submit(c, "pcalice", "acct-lease", "p0-lease", 8)
    p3 = submit(c, "pcbob", "acct-spot", "p3-spot", 4)
    c.wait_for("the jobs to run", lambda: all(c.state(j) == "RUNNING" for j in (p0, p3)))
    # The next sample after they run (every 5 s) shows them.
    want = {("planc_allocated_gpus", '{tier="P0"}'): 8.0,
            ("planc_allocated_gpus", '{tier="P3"}'): 4.0,
            ("planc_jobs_running", '{tier="P0"}'): 1.0,
            ("planc_jobs_running", '{tier="P3"}'): 1.0,
            ("planc_allocated_gpus", '{tier="P2"}'): 0.0}
    m = c.wait_for("the exporter to show the running jobs",
                   lambda: (lambda m: m if all(m.get(k) == v for k, v in want.items()) else None)(
                       metrics(c)), timeout=30)
    assert m[("planc_pool_gpus", "")] == 32.0  # 4 nodes x 8 GPUs
    assert m[("planc_exporter_source_up", '{source="slurmctld"}')] == 1.0
    assert 0 <= m[("planc_snapshot_age_seconds", '{source="slurmctld"}')] <= 60
    # Utilisation went from idle (100%) to 12/32 used (62.5% idle): no
    # threshold crossed.  Filling to 30 of 32 (6.25% idle: 8 + 8 + 2 GPUs of
    # P2 on the free room, no preemption) crosses 30% and 15%, not 5%.
    before = {t: m[("planc_idle_threshold_crossings_total", f'{{threshold="{t}"}}')]
              for t in ("0.05", "0.15", "0.30")}
    more = [submit(c, "pcbob", "acct-spot", "p2-spot", g) for g in (8, 8, 2)]
    c.wait_for("the P2 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in more))
    m = c.wait_for("the crossings to be counted",
                   lambda: (lambda m: m if m.get(("planc_allocated_gpus", '{tier="P2"}')) == 18.0
                            else None)(metrics(c)), timeout=30)
    after = {t: m[("planc_idle_threshold_crossings_total", f'{{threshold="{t}"}}')]
             for t in ("0.05", "0.15", "0.30")}
    assert after == {"0.05": before["0.05"], "0.15": before["0.15"] + 1,
                     "0.30": before["0.30"] + 1}, (before, after)

    # The same through HTTP, as Prometheus scrapes it, with HELP and TYPE.
    server, scrape = start_exporter(c)
    try:
        body = c.wait_for("the exporter to serve /metrics", scrape, timeout=30)
        assert "# TYPE planc_idle_threshold_crossings_total counter" in body
        assert "# HELP planc_allocated_gpus GPUs allocated to running jobs of the tier" in body
        assert parse(body)[("planc_allocated_gpus", '{tier="P0"}')] == 8.0
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and "stopping on SIGTERM" in err, err


def test_guaranteed_starts_count_for_the_sla_unless_held_back(c):
    wait_snapshots(c)
    key = lambda name, *labels: (name, "{" + ",".join(labels) + "}")
    m0 = fresh_metrics(c, "slurmctld")
    starts, within = (key(n, 'tier="P0"') for n in ("planc_guaranteed_starts_total",
                                                     "planc_guaranteed_starts_within_sla_total"))
    held = key("planc_guaranteed_starts_excluded_total", 'tier="P0"', 'reason="held"')
    quick = submit(c, "pcalice", "acct-lease", "p0-lease", 8)
    held_job, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:1", "--hold", "--wrap",
                           "sleep 300", user="pcalice")
    assert held_job, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(quick) == "RUNNING", timeout=60)
    fresh_metrics(c, "slurmctld")  # a sample saw the held job held
    c.run("scontrol", "release", held_job, check=True)
    c.wait_for("the released job to run", lambda: c.state(held_job) == "RUNNING", timeout=60)
    m = c.wait_for("both starts in the snapshot", lambda: (lambda m: m if m.get(held, 0) ==
                   m0.get(held, 0) + 1 else None)(fresh_metrics(c, "slurmctld")), timeout=30)
    # The quick one counts and met the SLA (started within 40 s of its
    # submission); the held one is left out, by reason.
    assert m[starts] == m0[starts] + 1 and m[within] == m0[within] + 1, (m0, m)


def planc_counters(c):
    """slurmctld/planc's counters in `scontrol show config`."""
    out = c.run("scontrol", "show", "config", check=True).stdout
    section = out[out.index("----- slurmctld/planc"):]
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+= (\d+)", section, re.M)}


def test_sample_looks_at_running_and_guaranteed_jobs_not_every_pending_one(c):
    """The 5 s sample does not walk every job record (issue 13's lock-hold
    target): it watches the running jobs of the tiers and the guaranteed
    pending ones, learns of starts from the job-begin hook and of new jobs
    from the ids handed out since the last sample.  40 held P3 jobs are
    looked at once, as new ids, then never again; the running jobs and a
    held P0 job submitted among them are in every sample's figures."""
    wait_snapshots(c)
    held = []
    for _ in range(40):
        j, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--gres=gpu:1", "--hold", "--wrap",
                        "sleep 300", user="pcbob")
        assert j, p.stderr
        held.append(j)
    held_p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:1", "--hold", "--wrap",
                          "sleep 300", user="pcalice")
    assert held_p0, p.stderr
    p0 = submit(c, "pcalice", "acct-lease", "p0-lease", 8)
    p3 = submit(c, "pcbob", "acct-spot", "p3-spot", 4)
    c.wait_for("the jobs to run", lambda: all(c.state(j) == "RUNNING" for j in (p0, p3)))
    # A sample after every submission and start has seen them all.
    n = planc_counters(c)["SampleCount"]
    before = c.wait_for("a sample after the starts",
                        lambda: (lambda k: k if k["SampleCount"] >= n + 1 else None)(planc_counters(c)),
                        timeout=30, interval=0.5)
    after = c.wait_for("three more samples",
                       lambda: (lambda k: k if k["SampleCount"] >= before["SampleCount"] + 3 else None)(
                           planc_counters(c)), timeout=60, interval=0.5)
    samples = after["SampleCount"] - before["SampleCount"]
    visited = after["SampleJobsVisitedTotal"] - before["SampleJobsVisitedTotal"]
    # Watched: the two running jobs and the held P0 job, nothing else.
    assert after["SampleWatchedJobs"] == 3, after
    assert after["SampleWalks"] == before["SampleWalks"], (before, after)
    assert visited <= 3 * samples, (visited, samples)
    m0 = fresh_metrics(c, "slurmctld")
    assert m0[("planc_allocated_gpus", '{tier="P0"}')] == 8.0
    assert m0[("planc_allocated_gpus", '{tier="P3"}')] == 4.0
    # The held P0 job, found among the new ids, was seen held: released, its
    # start is left out of the SLA for that reason.
    key = ("planc_guaranteed_starts_excluded_total", '{tier="P0",reason="held"}')
    c.run("scontrol", "release", held_p0, check=True)
    c.wait_for("the released P0 job to run", lambda: c.state(held_p0) == "RUNNING", timeout=60)
    c.wait_for("its start left out as held", lambda: fresh_metrics(c, "slurmctld").get(key, 0) ==
               m0.get(key, 0) + 1, timeout=30)


def test_preemptions_per_tier_and_per_job(c):
    wait_snapshots(c)
    m = metrics(c)
    assert m[("planc_exporter_source_up", '{source="preempt"}')] == 1.0
    before = m[("planc_preemptions_total", '{tier="P3"}')]
    p2_before = m[("planc_preemptions_total", '{tier="P2"}')]  # other modules' preemptions
    fillers = [submit(c, "pcbob", "acct-spot", "p3-spot", 8) for _ in range(4)]
    c.wait_for("the P3 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in fillers))
    p0 = submit(c, "pcalice", "acct-lease", "p0-lease", 8)
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=60)
    m = c.wait_for("the preemption in the snapshot",
                   lambda: (lambda m: m if m.get(("planc_preemptions_total", '{tier="P3"}'))
                            == before + 1 else None)(metrics(c)), timeout=30)
    assert m[("planc_preemptions_total", '{tier="P2"}')] == p2_before
    assert m[("planc_preemptions_per_job_24h_max", '{tier="P3"}')] >= 1.0
    assert m[("planc_preempted_jobs_24h", '{tier="P3",preemptions="1"}')] >= 1.0
    assert m[("planc_preempt_ledger_jobs", "")] >= 1.0


def test_run_segments_bills_and_the_backlog_while_postgresql_is_down(c):
    from test_billing import pg_ctl
    wait_snapshots(c)
    key = lambda name, tier=None: (name, f'{{tier="{tier}"}}' if tier else "")
    m0 = fresh_metrics(c, "jobcomp")
    # A P3 run of about 3 s: one segment, its seconds, one bill.
    j, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--gres=gpu:1", "--wrap", "sleep 3",
                    user="pcbob")
    assert j, p.stderr
    c.wait_for("the run to end", lambda: c.state(j) == "GONE", timeout=60)
    m = c.wait_for("its bill in the snapshot", lambda: (lambda m: m if m[key(
        "planc_bills_written_total")] >= m0[key("planc_bills_written_total")] + 1 else None)(
            metrics(c)), timeout=60)
    ended = key("planc_run_segments_ended_total", "P3")
    secs = key("planc_run_segment_seconds_total", "P3")
    assert m[ended] == m0[ended] + 1
    assert 3 <= m[secs] - m0[secs] <= 10
    assert m[key("planc_spool_backlog_records")] == 0
    # The bill database as a source: the billed totals of acct-spot's P3
    # runs are what the hourly table holds, read in the background.
    from test_billing import psql, wait_bills
    wait_bills(c, j, 1)
    server, scrape = start_exporter(c, "--database", db_conninfo(c), "--database-interval", "1")
    labels = '{cluster="planc",account="acct-spot",tier="P3"}'
    try:
        def agree():
            """The scrape's figures when they are the hourly table's, read
            before and after it (bills of earlier jobs may still arrive)."""
            q = ("SELECT sum(card_seconds), sum(core_seconds), sum(mem_gib_seconds), "
                 "sum(amount_micros) FROM planc.usage_hourly "
                 "WHERE account = 'acct-spot' AND tier = 'P3'")
            before = psql(c, q)[0]
            body = scrape() or ""
            if psql(c, q)[0] != before or 'source_up{source="database"} 1' not in body:
                return None
            m = parse(body)
            card, cores, gib_seconds, micros = before
            # Memory in bytes, the amount with its currency as a label
            # (planc.conf's Currency, which the bills carry).
            money = labels[:-1] + ',currency="CNY"}'
            ok = (m.get(("planc_billed_gpu_seconds_total", labels)) == float(card)
                  and m.get(("planc_billed_core_seconds_total", labels)) == float(cores)
                  and m.get(("planc_billed_memory_byte_seconds_total", labels))
                  == pytest.approx(float(gib_seconds) * 2**30, rel=1e-12)
                  and abs(m.get(("planc_billed_amount_total", money), -1) - int(micros) / 1e6)
                  < 1e-6)
            return m if ok else None
        db = c.wait_for("the exporter's totals to be the hourly table's", agree, timeout=30)
        newest = float(psql(c, "SELECT extract(epoch FROM max(end_time)) FROM planc.bill")[0][0])
        assert db[("planc_bill_newest_end_timestamp_seconds", "")] <= newest
        assert db[("planc_bill_newest_end_timestamp_seconds", "")] >= float(c.run(
            "sacct", "-n", "-X", "-P", "-o", "end", "-j", j,
            env={**c.env, "SLURM_TIME_FORMAT": "%s"}).stdout.split()[0])
        assert db[("planc_exporter_source_up", '{source="slurmctld"}')] == 1.0
        # PostgreSQL down: the next run waits in the spool, the snapshot goes
        # on and says so, the database source is down (not its last figures);
        # once it is back the backlog drains and the source is up again.
        pg_ctl(c, "stop")
        try:
            down = c.wait_for("the database source to be down", lambda: (lambda b: parse(b) if b and (
                'planc_exporter_source_up{source="database"} 0' in b) else None)(scrape()),
                timeout=30)
            assert ("planc_billed_gpu_seconds_total", labels) not in down
            assert down[("planc_exporter_source_up", '{source="jobcomp"}')] == 1.0
            j, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
            assert j, p.stderr
            m = c.wait_for("the backlog and a database error", lambda: (lambda m: m if (
                m[key("planc_spool_backlog_records")] >= 1 and m[key("planc_database_errors_total")]
                > m0[key("planc_database_errors_total")]) else None)(metrics(c)), timeout=60)
            assert m[key("planc_spool_oldest_record_age_seconds")] >= 0
        finally:
            up = c.ctl("up", check=False, timeout=300)  # starts PostgreSQL again
            assert up.returncode == 0, up.stdout + up.stderr
        c.wait_for("the backlog to drain",
                   lambda: metrics(c)[key("planc_spool_backlog_records")] == 0, timeout=120)
        c.wait_for("the database source to be up again",
                   lambda: 'planc_exporter_source_up{source="database"} 1' in (scrape() or ""),
                   timeout=60)
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert "source down: database: " in err, err
    assert "source up again: database" in err, err


def test_missing_corrupt_and_stale_snapshots_are_down_not_current(c):
    wait_snapshots(c)
    with tempfile.TemporaryDirectory() as d:
        # Missing: a source named that no plugin writes.
        p = once(c.state_dir, "--sources", "slurmctld,preempt,jobcomp,nosuch")
        assert p.returncode == 3, p.stdout + p.stderr
        m = parse(p.stdout)
        assert m[("planc_exporter_source_up", '{source="nosuch"}')] == 0.0
        assert m[("planc_exporter_source_up", '{source="slurmctld"}')] == 1.0
        assert "source down: nosuch: cannot open " in p.stderr, p.stderr
        # Corrupt: a copy with one byte changed.
        path = os.path.join(d, "planc_metrics_slurmctld")
        shutil.copy(os.path.join(c.state_dir, "planc_metrics_slurmctld"), path)
        data = bytearray(open(path, "rb").read())
        data[data.index(b"planc_pool_gpus") + 16] ^= 1
        open(path, "wb").write(bytes(data))
        p = once(d, "--sources", "slurmctld")
        assert p.returncode == 3
        m = parse(p.stdout)
        assert m[("planc_exporter_source_up", '{source="slurmctld"}')] == 0.0
        assert ("planc_pool_gpus", "") not in m
        assert "source down: slurmctld: corrupt snapshot: " in p.stderr, p.stderr
        # Stale: a good copy no plugin rewrites, older than --max-age.
        shutil.copy(os.path.join(c.state_dir, "planc_metrics_slurmctld"), path)
        p = c.wait_for("the copy to be older than --max-age 1",
                       lambda: (lambda p: p if p.returncode == 3 else None)(
                           once(d, "--sources", "slurmctld", "--max-age", "1")), timeout=30)
        m = parse(p.stdout)
        assert m[("planc_exporter_source_up", '{source="slurmctld"}')] == 0.0
        assert ("planc_pool_gpus", "") not in m
        assert m[("planc_snapshot_age_seconds", '{source="slurmctld"}')] >= 2
        assert re.search(r"source down: slurmctld: stale: written \d+ s ago \(--max-age 1\)",
                         p.stderr), p.stderr
    # A database role outside planc_metrics: down, with what to do.
    p = once(c.state_dir, "--database", db_conninfo(c, "planc_slurmctld"))
    assert p.returncode == 3, p.stdout + p.stderr
    assert parse(p.stdout)[("planc_exporter_source_up", '{source="database"}')] == 0.0
    assert re.search(r"source down: database: planc\.metrics_billed\(\): .*permission denied.* "
                     r"\(put the role in planc_metrics: planc-bill sync-roles --metrics ROLE\)",
                     p.stderr), p.stderr
    bad = subprocess.run([EXPORTER, "--database", "nosuchkey=1"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert 'planc-exporter: --database: invalid connection option "nosuchkey"' in bad.stderr
    bad = subprocess.run([EXPORTER, "--max-age", "soon"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "--max-age 'soon': give a whole number of seconds, 1 to 86400" in bad.stderr
