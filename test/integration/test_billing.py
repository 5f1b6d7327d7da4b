"""jobcomp/planc on the private cluster: bills as users and admins see them.

Bills are read the ways people read them: `sacct -c` as the job's owner,
`planc-bill` (list/report/reconcile), and psql on the bill table as an
admin.  PostgreSQL runs socket-only with peer authentication, so a test
user reaches the database only as themselves.
"""
import csv
import datetime
import io
import json
import os
import pwd
import re
import signal
import stat
import subprocess
import time

import pytest

from conftest import ROOT

BILL_TOOL = os.path.join(ROOT, "planc-bill")
PGBIN = "/usr/lib/postgresql/15/bin"


def psql(c, sql, *params, user="postgres"):
    """Rows (lists of text) of a query run as an admin; params bound by psql."""
    args = ["psql", "-X", "-q", "-t", "-A", "-F", "\x1f", "-v", "ON_ERROR_STOP=1", "-U", user]
    for i, p in enumerate(params):
        args += ["-v", f"p{i}={p}"]
    p = subprocess.run(args, input=sql, capture_output=True, text=True, env=c.env, timeout=60)
    assert p.returncode == 0, p.stderr
    return [line.split("\x1f") for line in p.stdout.splitlines() if line]


def bills(c, jobid_sql_filter, *params):
    cols = ("job_id,segment,user_name,account,tier,qos,state,cpus,mem_mib,gpu_cards,"
            "billable_seconds,card_seconds,core_seconds,amount_minor,zero_reason,job_name,"
            "extract(epoch from start_time)::bigint,extract(epoch from end_time)::bigint")
    rows = psql(c, f"SELECT {cols} FROM planc.bill WHERE {jobid_sql_filter} ORDER BY segment, start_time",
                *params)
    keys = [k.split(".")[-1].split(" ")[0] for k in cols.split(",")]
    keys[-2:] = ["start", "end"]
    return [dict(zip(keys, r)) for r in rows]


def wait_bills(c, jobid, n, timeout=60):
    return c.wait_for(f"{n} bill(s) for job {jobid}",
                      lambda: (lambda b: b if len(b) >= n else None)(bills(c, f"job_id = {int(jobid)}")),
                      timeout=timeout)


def bill_tool(c, *args, user=None):
    db = f"host={c.env['PGHOST']} port={c.env['PGPORT']} dbname=planc"
    env = {k: v for k, v in c.env.items() if k != "PGUSER"}
    return c.run(BILL_TOOL, "--db", db, *args, user=user, env=env)


def sacct_c(c, user, *args):
    env = {k: v for k, v in c.env.items() if k != "PGUSER"}
    p = c.run("sacct", "-c", "-n", "-P", "-o", "jobid,user,account,qos,state,elapsed", *args,
              user=user, env=env)
    assert p.returncode == 0, p.stderr
    return [l.split("|") for l in p.stdout.splitlines() if l.strip()]


@pytest.fixture
def c(cluster):
    cluster.cancel_all()
    yield cluster
    cluster.cancel_all()


def finished(c, jobid):
    return c.state(jobid) == "GONE"


def test_completed_p0_bill_matches_allocation_and_elapsed(c):
    jobid, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:2", "-c", "3",
                        "--mem=3000M", "--wrap", "sleep 3", user="pcalice")
    assert jobid, p.stderr
    c.wait_for("the job to end", lambda: finished(c, jobid), timeout=90)
    (b,) = wait_bills(c, jobid, 1)
    elapsed = int(c.wait_for("sacct's ElapsedRaw",
                             lambda: c.sacct_field(jobid, "ElapsedRaw") or None))
    alloc = c.sacct_field(jobid, "AllocTRES")
    print("bill:", b, "sacct AllocTRES:", alloc, "ElapsedRaw:", elapsed)
    assert (b["user_name"], b["account"], b["tier"], b["qos"], b["state"]) == \
        ("pcalice", "acct-lease", "P0", "p0-lease", "COMPLETED")
    assert "cpu=3" in alloc and "gres/gpu=2" in alloc and "mem=3000M" in alloc
    assert int(b["cpus"]) == 3 and int(b["mem_mib"]) == 3000
    assert float(b["gpu_cards"]) == 2.0
    assert int(b["billable_seconds"]) == elapsed
    assert float(b["card_seconds"]) == 2 * elapsed
    assert int(b["core_seconds"]) == 3 * elapsed
    # List prices at P0 (x1.0): 20.00/card-hour, 0.10/core-hour, 0.01/GiB-hour,
    # rounded half up to cents once per bill.
    exact_cents = (2 * 20.00 + 3 * 0.10 + 3000 / 1024 * 0.01) * elapsed / 3600 * 100
    assert int(b["amount_minor"]) == int(exact_cents + 0.5), exact_cents
    assert b["zero_reason"] == ""
    # The owner sees it in sacct -c, with the QoS and state Slurm had.
    rows = sacct_c(c, "pcalice", "-j", jobid)
    assert [r[:5] for r in rows] == [[jobid, "pcalice", "acct-lease", "p0-lease", "COMPLETED"]]


FIRST_RUN_STUBBORN_THEN_FINISH = """#!/bin/bash
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep 2; exit 0; fi
trap '' TERM
while true; do sleep 0.2; done
"""


def test_p2_preempted_then_completed_has_free_and_charged_segment(small_cluster):
    c = small_cluster
    c.cancel_all()
    script = c.write_script("p2_then_finish.sh", FIRST_RUN_STUBBORN_THEN_FINISH)
    victim, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:8", "-N1", script,
                         user="pcbob")
    assert victim, p.stderr
    c.wait_for("the P2 job to run", lambda: c.state(victim) == "RUNNING", timeout=60)
    time.sleep(2)
    # 6 GPUs: the 1-node cluster caps P0+P1 at 80% of its 8.
    pre, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:6", "-N1",
                      "--wrap", "sleep 3", user="pcalice")
    assert pre, p.stderr
    segs = wait_bills(c, victim, 2, timeout=240)
    for s in segs:
        print("segment:", s)
    first, second = segs[0], segs[1]
    assert (first["segment"], first["state"], first["tier"]) == ("0", "PREEMPTED", "P2")
    assert int(first["amount_minor"]) == 0
    assert first["zero_reason"] == "preempted: unfinished preempted time is not billed"
    assert float(first["card_seconds"]) > 0, "usage is recorded even when free"
    assert (second["segment"], second["state"]) == ("1", "COMPLETED")
    assert int(second["amount_minor"]) > 0 and second["zero_reason"] == ""
    # P2 price: 8 cards x 0.35 x 20.00/h (+ 1 core, memory), per second run.
    secs = int(second["billable_seconds"])
    exact = (8 * 20.00 + 0.10 + int(second["mem_mib"]) / 1024 * 0.01) * 0.35 * secs / 3600 * 100
    assert int(second["amount_minor"]) == int(exact + 0.5)
    # The owner sees both runs in sacct -c, the preempted one first.
    rows = sacct_c(c, "pcbob", "-j", victim)
    assert [r[4] for r in rows] == ["PREEMPTED", "COMPLETED"], rows
    # And in planc-bill, the free run says why.
    out = bill_tool(c, "list", "-j", victim, "--format", "csv", user="pcbob")
    assert out.returncode == 0, out.stderr
    listed = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["State"], r["Amount"] == "0.00") for r in listed] == \
        [("PREEMPTED", True), ("COMPLETED", False)]
    assert listed[0]["Free"].startswith("preempted")
    c.cancel_all()


def test_users_see_only_their_own_bills(c):
    a, _ = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--wrap", "true", user="pcalice")
    b, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
    assert a and b
    wait_bills(c, a, 1)
    wait_bills(c, b, 1)
    start = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))
    alice = sacct_c(c, "pcalice", "-a", "-S", start)
    bob = sacct_c(c, "pcbob", "-a", "-S", start)
    print("pcalice sees", len(alice), "rows; pcbob sees", len(bob))
    assert a in [r[0] for r in alice] and b not in [r[0] for r in alice]
    assert b in [r[0] for r in bob] and a not in [r[0] for r in bob]
    assert {r[1] for r in alice} == {"pcalice"} and {r[1] for r in bob} == {"pcbob"}
    # The coordinator of acct-spot (pccarol) sees pcbob's acct-spot bill, not
    # pcalice's acct-lease one; root (admin) sees both.
    carol = [r[0] for r in sacct_c(c, "pccarol", "-a", "-S", start)]
    assert b in carol and a not in carol
    root = [r[0] for r in sacct_c(c, "root", "-a", "-S", start)]
    assert a in root and b in root
    # Enforced by PostgreSQL, not by the client: psql as pcbob.
    env = {k: v for k, v in c.env.items() if k != "PGUSER"}
    q = c.run("psql", "-X", "-t", "-A", "-U", "pcbob", "-c",
              "SELECT DISTINCT user_name FROM planc.bill", user="pcbob", env=env)
    assert q.returncode == 0, q.stderr
    assert q.stdout.split() == ["pcbob"]
    w = c.run("psql", "-X", "-U", "pcbob", "-c",
              "UPDATE planc.bill SET amount_minor = 0", user="pcbob", env=env)
    assert w.returncode != 0 and "permission denied" in w.stderr
    # No database secret in any world-readable file: the cluster's
    # slurm.conf names no password, and slurmctld writes through peer auth.
    conf = open(os.path.join(c.dir, "etc", "slurm.conf")).read()
    assert "password" not in conf.lower()


def test_names_with_quotes_and_non_ascii_are_stored_intact(c):
    name = "it's a \"quoted\" job; DROP TABLE x; -- 名字 ✓ \\ end"
    jobid, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "-J", name, "--wrap", "true",
                        user="pcbob")
    assert jobid, p.stderr
    (b,) = wait_bills(c, jobid, 1)
    assert b["job_name"] == name
    env = {k: v for k, v in c.env.items() if k != "PGUSER"}
    p = c.run("sacct", "-c", "-n", "-P", "-j", jobid, "-o", "jobname%100", user="pcbob", env=env)
    assert p.stdout.strip() == name


def all_done(c, jobid, what):
    """Waits until no task of the array is left.  On a loaded machine slurmd
    may miss a launch confirmation and Slurm holds the task ("launch failed
    requeued held"); release such tasks as an admin would."""
    def done():
        left = c.run("squeue", "-h", "-r", "-j", jobid, "-o", "%i %r").stdout.strip()
        if "held" in left:
            c.run("scontrol", "release", jobid)
        return left == ""
    c.wait_for(what, done, timeout=900, interval=3)


def pg_ctl(c, action):
    data = os.path.join(c.dir, "db", "pg", "data")
    p = subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", data,
                        "-m", "fast", "-w", action], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def spool_files(c):
    d = os.path.join(c.dir, "state", "ctld", "planc_jobcomp")
    return sorted(f for f in os.listdir(d) if f.endswith(".spool"))


def test_postgres_down_while_200_jobs_finish_then_all_bills_arrive_once(c):
    pg_ctl(c, "stop")
    try:
        # At most 40 at once: a 2-core machine launching 200 jobs in one go
        # makes slurmd miss launch confirmations.
        jobid, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--array=0-199%40", "-c", "1",
                            "--mem=100M", "--wrap", "true", user="pcbob")
        assert jobid, p.stderr
        all_done(c, jobid, "200 array tasks to finish (PostgreSQL down)")
        # slurmctld kept scheduling; the bills wait on disk.
        lines = 0
        d = os.path.join(c.dir, "state", "ctld", "planc_jobcomp")
        for f in spool_files(c):
            lines += sum(1 for _ in open(os.path.join(d, f), "rb"))
        print("spool while PostgreSQL is down:", spool_files(c), lines, "records")
        assert lines >= 200
    finally:
        up = c.ctl("up", check=False, timeout=300)  # starts PostgreSQL again
        assert up.returncode == 0, up.stderr
    # One COMPLETED bill per task (a task that lost its node, which happens on
    # a loaded machine, has one NODE_FAIL bill more: a real, free segment).
    rows = c.wait_for("200 completed bills", lambda: (lambda r: r if int(r[0][0]) >= 200 else None)(
        psql(c, "SELECT count(*) FILTER (WHERE state = 'COMPLETED'), count(DISTINCT job_id),"
                " count(*) FILTER (WHERE state NOT IN ('COMPLETED', 'NODE_FAIL')) FROM planc.bill "
                "WHERE array_job_id = :'p0'", jobid)), timeout=120, interval=2)
    completed, distinct, other = rows[0]
    assert (int(completed), int(distinct), int(other)) == (200, 200, 0)
    # The hourly table counted each segment exactly once.
    (seg,) = psql(c, "SELECT sum(segments) FROM planc.usage_hourly u WHERE user_name = 'pcbob'"
                     " AND tier = 'P3'")
    (billed,) = psql(c, "SELECT count(*) FROM planc.bill WHERE user_name = 'pcbob' AND tier = 'P3'")
    assert seg == billed
    c.wait_for("the spool to drain", lambda: spool_files(c) in ([], [spool_files(c)[-1]]), timeout=30)


def test_slurmctld_sigkill_while_jobs_finish_loses_no_bill(c):
    start = int(time.time()) - 5
    jobid, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--array=0-59", "-c", "1",
                        "--mem=100M", "--wrap", "sleep $((SLURM_ARRAY_TASK_ID % 4))", user="pcbob")
    assert jobid, p.stderr
    c.wait_for("some tasks to finish", lambda: int(psql(
        c, "SELECT count(*) FROM planc.bill WHERE array_job_id = :'p0'", jobid)[0][0]) >= 5,
        timeout=120)
    pid = int(open(os.path.join(c.dir, "run", "slurmctld.pid")).read())
    t_kill = time.time()
    os.kill(pid, signal.SIGKILL)
    time.sleep(2)
    up = c.ctl("up", check=False, timeout=300)
    assert up.returncode == 0, up.stderr
    t_up = time.time()
    # A SIGKILLed slurmctld restarts from its last saved state: tasks that
    # had started since may be launched again, which slurmd refuses
    # ("Duplicate jobid"): Slurm drains the node and holds the task.  An
    # admin resumes the nodes and releases the tasks; do the same once the
    # first copies (sleep <= 3 s) are gone.
    time.sleep(8)
    c.run("scontrol", "update", "nodename=ALL", "state=resume")
    all_done(c, jobid, "all tasks to finish")
    c.wait_for("a bill for every task", lambda: int(psql(
        c, "SELECT count(DISTINCT job_id) FROM planc.bill WHERE array_job_id = :'p0'", jobid)[0][0]) >= 60,
        timeout=120, interval=2)
    end = int(time.time()) + 5
    r = bill_tool(c, "reconcile", "-S", str(start), "-E", str(end), user=None)
    print(r.stdout, r.stderr)
    # A run that began after slurmctld's last state save and ended while it
    # was down never reaches jobcomp: the restarted slurmctld does not know
    # it ran.  slurmdbd does, and reconcile lists it.  Only such runs may be
    # missing: each started inside the crash window.
    missing = re.findall(r"missing: job (\d+) start (\S+ \S+?)\+00", r.stdout)
    counted = re.search(r" (\d+) without a bill", r.stdout)
    assert counted and int(counted.group(1)) == len(missing), r.stdout  # every one checked
    for job, when in missing:
        t = datetime.datetime.fromisoformat(when).replace(
            tzinfo=datetime.timezone.utc).timestamp()
        assert t_kill - 60 <= t <= t_up, f"job {job} started at {when}, outside the crash window"
    fill = bill_tool(c, "reconcile", "-S", str(start), "-E", str(end), "--fill", user=None)
    again = bill_tool(c, "reconcile", "-S", str(start), "-E", str(end), user=None)
    print(fill.stdout, again.stdout)
    # The restarted slurmctld hands out again the job ids it had forgotten,
    # which the slurmd's still remember as theirs ("Duplicate jobid": the
    # node is drained).  Restart the whole cluster (state kept) so the tests
    # after this one start clean.
    c.ctl("down", timeout=300)
    up = c.ctl("up", check=False, timeout=300)
    assert up.returncode == 0, up.stderr
    assert r.returncode in (0, 3), r.stdout + r.stderr
    assert fill.returncode == 0, fill.stdout + fill.stderr
    # After an admin's `reconcile --fill` for the crash window, nothing is
    # without a bill.
    assert again.returncode == 0 and " 0 without a bill" in again.stdout, again.stdout


def test_report_totals_by_account_user_tier_and_hour(c):
    jobid, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--gres=gpu:1", "--wrap", "sleep 2",
                        user="pcbob")
    wait_bills(c, jobid, 1)
    out = bill_tool(c, "report", "--by", "account,user,tier", "--format", "json", user="pcbob")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows and {r["User"] for r in rows} == {"pcbob"}
    (sum_amount,) = psql(c, "SELECT sum(amount_minor) FROM planc.bill WHERE user_name = 'pcbob'")
    assert round(sum(r["Amount"] for r in rows) * 100) == int(sum_amount[0])
    table = bill_tool(c, "report", "--by", "day,tier", user="pcbob")
    assert table.returncode == 0 and "TOTAL" in table.stdout, table.stderr
    print(table.stdout)
    bad = bill_tool(c, "report", "--by", "planet", user="pcbob")
    assert bad.returncode != 0 and "--by 'planet': use account, user, tier, day or hour" in bad.stderr


def test_sacct_c_filters(c):
    ok, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcalice")
    bad, _ = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--wrap", "exit 3", user="pcalice")
    other, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
    for j in (ok, bad, other):
        assert j
        wait_bills(c, j, 1)
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))
    ids = lambda *args: {r[0] for r in sacct_c(c, "root", "-S", start, *args)}
    assert {ok, other} <= ids("-a", "-A", "acct-spot") and bad not in ids("-a", "-A", "acct-spot")
    assert ids("-u", "pcbob") & {ok, bad, other} == {other}
    # With -s and no -E, sacct's window ends where it starts: give -E.
    assert ids("-a", "-s", "F", "-E", "now") & {ok, bad, other} == {bad}
    assert ids("-a", "-j", f"{ok},{other}") == {ok, other}
    # A window that ends before these jobs ran shows none of them.
    fmt = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))
    before = {r[0] for r in sacct_c(c, "root", "-a", "-S", fmt(time.time() - 7200),
                                    "-E", fmt(time.time() - 3600))}
    assert not before & {ok, bad, other}


def test_job_name_that_is_not_utf8_is_billed_and_billing_goes_on(c):
    # Slurm takes any bytes in a name; PostgreSQL (UTF8) refuses invalid
    # ones.  The bill is stored with U+FFFD in their place, and the next
    # job's bill arrives as usual.
    bad, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "-J", "bad\udcffname", "--wrap", "true",
                      user="pcbob")
    assert bad, p.stderr
    (b,) = wait_bills(c, bad, 1)
    assert b["job_name"] == "bad\ufffdname"
    after, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
    wait_bills(c, after, 1)


def test_postgres_log_is_private(c):
    """PostgreSQL's log quotes failing statements, other users' data in them:
    only postgres may read it (700 directory, 600 files), as a packaged
    PostgreSQL keeps /var/log/postgresql."""
    marker = f"planc-private-{os.getpid()}-{time.time_ns()}"
    env = {k: v for k, v in c.env.items() if k != "PGUSER"}
    q = c.run("psql", "-X", "-U", "pcalice", "-c", f"SELECT '{marker}'::int", user="pcalice",
              env=env)
    assert q.returncode != 0, "the statement must fail, so that PostgreSQL logs it"
    logdir = os.path.join(c.dir, "log", "postgresql")
    log = os.path.join(logdir, "postgres.log")
    c.wait_for("the failing statement in PostgreSQL's log",
               lambda: marker in open(log, errors="replace").read())
    for path, mode in ((logdir, 0o700), (log, 0o600)):
        st = os.stat(path)
        assert (stat.S_IMODE(st.st_mode), pwd.getpwuid(st.st_uid).pw_name) == (mode, "postgres"), path
    peek = c.run("cat", log, user="pcbob")
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
    # No other file under the cluster's log directory another user can read
    # holds it.
    for root, _, files in os.walk(os.path.join(c.dir, "log")):
        for f in files:
            path = os.path.join(root, f)
            if c.run("test", "-r", path, user="pcbob").returncode == 0:
                assert marker not in open(path, errors="replace").read(), path


def test_scontrol_requeue_bill_says_requeued_like_sacct(c):
    jobid, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "sleep 300", user="pcbob")
    assert jobid, p.stderr
    c.wait_for("the job to run", lambda: c.state(jobid) == "RUNNING", timeout=60)
    time.sleep(1)  # one billable second at least
    c.run("scontrol", "requeue", jobid, check=True)
    (b,) = wait_bills(c, jobid, 1)
    env = dict(c.env, SLURM_TIME_FORMAT="%s")

    def sacct_state():
        p = c.run("sacct", "-D", "-X", "-n", "-P", "-j", jobid, "-o", "Start,State", env=env)
        return dict(l.split("|") for l in p.stdout.splitlines()).get(b["start"])
    in_sacct = c.wait_for("slurmdbd's record of the requeued run", sacct_state)
    c.run("scancel", jobid)
    print("bill:", b, "sacct:", in_sacct)
    assert (b["segment"], b["state"], in_sacct) == ("0", "REQUEUED", "REQUEUED")
    # A requeue by an admin is not a preemption: the run is charged.
    assert int(b["billable_seconds"]) >= 1 and b["zero_reason"] == ""
    assert [r[4] for r in sacct_c(c, "pcbob", "-j", jobid)] == ["REQUEUED"]
