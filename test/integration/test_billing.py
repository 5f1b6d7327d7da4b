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
import math
import os
import pwd
import re
import signal
import stat
import subprocess
import time
from fractions import Fraction

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


# The columns a hand-made bill fills, for INSERT ... SELECT in the tests
# that store bills without running jobs.
INSERT_BILL = """
  INSERT INTO planc.bill (cluster, job_id, start_time, end_time, segment, uid, user_name,
    account, tier, qos, partition, nodes, node_count, state, wait_status, exit_status,
    exit_signal, exit_code, job_name, tres_req, tres_alloc, cpus, mem_mib, gpu_cards,
    gpu_detail, billable_seconds, card_seconds, core_seconds, mem_gib_seconds, currency,
    card_hour_price, core_hour_price, mem_gib_hour_price, tier_factor, amount_minor,
    amount_micros, zero_reason, note, admin_comment, source)"""


def user_env(c):
    """The cluster's environment for a command run as a Slurm user: their
    own PostgreSQL role (peer authentication), not the admin's PGUSER."""
    return {k: v for k, v in c.env.items() if k != "PGUSER"}


def bills(c, jobid_sql_filter, *params):
    cols = ("job_id,segment,user_name,account,tier,qos,state,cpus,mem_mib,gpu_cards,"
            "billable_seconds,card_seconds,core_seconds,amount_minor,amount_micros,zero_reason,"
            "wait_status,exit_status,exit_signal,exit_code,source,note,job_name,"
            "extract(epoch from start_time)::bigint,extract(epoch from end_time)::bigint")
    rows = psql(c, f"SELECT {cols} FROM planc.bill WHERE {jobid_sql_filter} ORDER BY segment, start_time",
                *params)
    keys = [k.split(".")[-1].split(" ")[0] for k in cols.split(",")]
    keys[-2:] = ["start", "end"]
    return [dict(zip(keys, r)) for r in rows]


def exact_micros(cards, cores, mem_mib, seconds, permille=1000):
    """The exact amount in micro-CNY at the example's list prices (20.00 per
    card-hour, 0.10 per core-hour, 0.01 per GiB-hour) and a tier factor,
    rounded half up once, as common/billing.h does: exact arithmetic."""
    per_hour = Fraction(cards * 20_000_000 + cores * 100_000) + Fraction(mem_mib * 10_000, 1024)
    exact = per_hour * seconds * permille / (3600 * 1000)
    return math.floor(exact + Fraction(1, 2))


def wait_hours_counted(c, timeout=60):
    """Until every bill stored so far is in planc.usage_hourly: jobcomp/planc
    adds a batch's hours just after it stores the batch (sql/0011)."""
    c.wait_for("the hourly totals to count every bill stored", lambda: psql(
        c, "SELECT count(*) FROM planc.bill b, planc.rollup_state s WHERE b.seq > s.last_seq")
        == [["0"]], timeout=timeout, interval=0.2)


def wait_bills(c, jobid, n, timeout=60):
    return c.wait_for(f"{n} bill(s) for job {jobid}",
                      lambda: (lambda b: b if len(b) >= n else None)(bills(c, f"job_id = {int(jobid)}")),
                      timeout=timeout)


def bill_tool(c, *args, user=None, tz=None):
    db = f"host={c.env['PGHOST']} port={c.env['PGPORT']} dbname=planc"
    env = user_env(c)
    if tz:
        env["TZ"] = tz
    return c.run(BILL_TOOL, "--db", db, *args, user=user, env=env)


def sacct_c(c, user, *args):
    env = user_env(c)
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
    # kept exact to a micro-unit (rounded half up once); the bill alone in
    # cents is that rounded half up.
    assert int(b["amount_micros"]) == exact_micros(2, 3, 3000, elapsed)
    assert int(b["amount_minor"]) == (int(b["amount_micros"]) + 5000) // 10000
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
    assert int(first["amount_micros"]) == 0
    assert first["zero_reason"] == "preempted: unfinished preempted time is not billed"
    assert float(first["card_seconds"]) > 0, "usage is recorded even when free"
    assert (second["segment"], second["state"]) == ("1", "COMPLETED")
    assert int(second["amount_micros"]) > 0 and second["zero_reason"] == ""
    # P2 price: 8 cards x 0.35 x 20.00/h (+ 1 core, memory), per second run.
    secs = int(second["billable_seconds"])
    assert int(second["amount_micros"]) == exact_micros(8, 1, int(second["mem_mib"]), secs, 350)
    # The owner sees both runs in sacct -c, the preempted one first.
    rows = sacct_c(c, "pcbob", "-j", victim)
    assert [r[4] for r in rows] == ["PREEMPTED", "COMPLETED"], rows
    # And in planc-bill, the free run says why.
    out = bill_tool(c, "list", "-j", victim, "--csv", user="pcbob")
    assert out.returncode == 0, out.stderr
    listed = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["State"], float(r["Amount"]) == 0) for r in listed] == \
        [("PREEMPTED", True), ("COMPLETED", False)]
    assert listed[1]["Amount"] == "%d.%06d" % divmod(int(second["amount_micros"]), 10**6)
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
    env = user_env(c)
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
    env = user_env(c)
    p = c.run("sacct", "-c", "-n", "-P", "-j", jobid, "-o", "jobname%100", user="pcbob", env=env)
    assert p.stdout.strip() == name


def all_done(c, jobid, what):
    """Waits until no task of the array is left.  On a loaded machine slurmd
    may miss a launch confirmation and Slurm holds the task ("launch failed
    requeued held"); release such tasks as an admin would."""
    seen = {}

    def done():
        left = c.run("squeue", "-h", "-r", "-j", jobid, "-o", "%i %T %r").stdout.strip()
        seen["left"] = left
        if "held" in left:
            c.run("scontrol", "release", jobid)
        return left == ""
    # Under pytest's own 900 s, so that a timeout says what was left.
    try:
        c.wait_for(what, done, timeout=600, interval=3)
    except AssertionError as e:
        raise AssertionError(f"{e}; still queued: {seen.get('left', '')[:2000]}") from None


def pg_ctl(c, action):
    data = os.path.join(c.dir, "db", "pg", "data")
    p = subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", data,
                        "-m", "fast", "-w", action], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def spool_dir(c):
    """jobcomp/planc's spool in the default place (SpoolDir unset)."""
    return os.path.join(c.dir, "state", "ctld", "planc_jobcomp")


def spool_files(c):
    return sorted(f for f in os.listdir(spool_dir(c)) if f.endswith(".spool"))


def spool_drained(c):
    """Every segment slurmctld has spooled is stored: no closed spool file
    waits and the one being appended to is empty."""
    files = spool_files(c)
    return len(files) <= 1 and all(
        os.path.getsize(os.path.join(spool_dir(c), f)) == 0 for f in files)


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
        d = spool_dir(c)
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
    wait_hours_counted(c)
    (seg,) = psql(c, "SELECT sum(segments) FROM planc.usage_hourly u WHERE user_name = 'pcbob'"
                     " AND tier = 'P3'")
    (billed,) = psql(c, "SELECT count(*) FROM planc.bill WHERE user_name = 'pcbob' AND tier = 'P3'")
    assert seg == billed
    c.wait_for("the spool to drain", lambda: spool_files(c) in ([], [spool_files(c)[-1]]), timeout=30)


def marked_array(c, tasks, body):
    """Submits a pcbob P3 array whose every run first writes "<job id>
    <time>" to a markers file: what really reached a node.  Returns (job
    id, markers path)."""
    markers = os.path.join(c.work, f"markers-{time.time_ns()}")
    open(markers, "w").close()
    os.chmod(markers, 0o666)
    jobid, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", f"--array={tasks}", "-c", "1",
                        "--mem=100M", "--wrap", f'echo "$SLURM_JOB_ID $(date +%s)" >> {markers}; '
                        + body, user="pcbob")
    assert jobid, p.stderr
    return jobid, markers


def utc_seconds(when):
    return int(datetime.datetime.fromisoformat(when).replace(
        tzinfo=datetime.timezone.utc).timestamp())


def account_for_runs(c, markers, array_job, window):
    """Where each run that reached a node (a line its script wrote to
    `markers` as it began) is known: billed, only in slurmdbd, only in the
    run-start journal (reconcile's "unrecorded"), or nowhere ("lost").
    A run is matched by job id and a start at most 30 s before its line.
    Returns (counts, reconcile's output)."""
    began = [tuple(map(int, l.split())) for l in open(markers) if l.strip()]
    billed = {(int(j), int(s)) for j, s in psql(
        c, "SELECT job_id, extract(epoch FROM start_time)::bigint FROM planc.bill"
           " WHERE array_job_id = :'p0'", array_job)}
    p = c.run("sacct", "-D", "-X", "-n", "-P", "-j", array_job, "-o", "JobIDRaw,Start",
              env=dict(c.env, SLURM_TIME_FORMAT="%s"))
    dbd = {(int(j), int(s)) for j, s in (l.split("|") for l in p.stdout.splitlines()) if s.isdigit()}
    r = bill_tool(c, "reconcile", "-S", str(window[0]), "-E", str(window[1]))
    journal = {(int(j), utc_seconds(w)) for j, w in
               re.findall(r"unrecorded: job (\d+) start (\S+ \S+?)\+00", r.stdout)}

    def has(runs, job, t):
        return any(j == job and s <= t <= s + 30 for j, s in runs)
    counts = dict.fromkeys(("reached nodes", "billed", "slurmdbd only", "journal only", "lost"), 0)
    for job, t in began:
        counts["reached nodes"] += 1
        where = ("billed" if has(billed, job, t) else "slurmdbd only" if has(dbd, job, t)
                 else "journal only" if has(journal, job, t) else "lost")
        counts[where] += 1
    counts["journal starts that never reached a node"] = sum(
        1 for j, s in journal if not any(job == j and s <= t <= s + 30 for job, t in began))
    return counts, r


def wait_all_runs_accounted_for(c, markers, array_job, window):
    """Waits until no run that reached a node is lost (reconcile lists a
    journal-only start once slurmdbd has had a minute to hear of it);
    prints and returns (counts, reconcile's output)."""
    counts, r = c.wait_for("every run that reached a node to be accounted for", lambda: (
        lambda cr: cr if cr[0]["lost"] == 0 else None)(
        account_for_runs(c, markers, array_job, window)), timeout=180, interval=5)
    print("runs after the crash:", counts)
    print(r.stdout)
    return counts, r


def restart_cluster_clean(c):
    """The restarted slurmctld hands out again the job ids it had
    forgotten, which the slurmd's still remember as theirs ("Duplicate
    jobid": the node is drained).  Restart the whole cluster (state kept) so
    the tests after a crash start clean.  Job ids given out before the crash
    are not given out again (FirstJobId past them): the tests after this one
    find a job's bills and records by its id."""
    used = [int(x) for x in psql(c, "SELECT coalesce(max(job_id), 0) FROM planc.bill")[0]]
    out = c.run("sacct", "-a", "-X", "-D", "-n", "-P", "-o", "JobIDRaw", "-S", "2020-01-01").stdout
    used += [int(x) for x in out.split() if x.isdigit()]
    extra = os.path.join(c.dir, "etc", "slurm.conf.extra")
    lines = open(extra).read().splitlines() if os.path.exists(extra) else []
    lines = [l for l in lines if not l.lower().startswith("firstjobid=")]
    with open(extra, "w") as f:
        f.write("\n".join(lines + [f"FirstJobId={max(used) + 100}"]) + "\n")
    c.ctl("down", timeout=300)
    up = c.ctl("up", check=False, timeout=300)
    assert up.returncode == 0, up.stderr
    # Drained nodes stay drained across a restart: resume them (fails
    # harmlessly when none is).
    c.run("scontrol", "update", "nodename=ALL", "state=resume")


def sigkill_slurmctld(c):
    pid = int(open(os.path.join(c.dir, "run", "slurmctld.pid")).read())
    os.kill(pid, signal.SIGKILL)
    c.wait_for("slurmctld to be gone", lambda: not os.path.exists(f"/proc/{pid}") or
               open(f"/proc/{pid}/stat").read().split()[2] == "Z")
    return time.time()


def test_slurmctld_sigkill_while_jobs_finish_loses_no_bill(c):
    start = int(time.time()) - 5
    jobid, markers = marked_array(c, "0-59", "sleep $((SLURM_ARRAY_TASK_ID % 4))")
    c.wait_for("some tasks to finish", lambda: int(psql(
        c, "SELECT count(*) FROM planc.bill WHERE array_job_id = :'p0'", jobid)[0][0]) >= 5,
        timeout=120)
    t_kill = sigkill_slurmctld(c)
    up = c.ctl("up", check=False, timeout=300)
    assert up.returncode == 0, up.stderr
    t_up = time.time()
    # A SIGKILLed slurmctld restarts from its last saved state: tasks that
    # had started since may be launched again, which slurmd refuses
    # ("Duplicate jobid"): Slurm drains the node and holds the task.  An
    # admin resumes the nodes and releases the tasks; do the same once the
    # first copies (sleep <= 3 s) are gone.
    time.sleep(8)
    try:
        c.run("scontrol", "update", "nodename=ALL", "state=resume")
        all_done(c, jobid, "all tasks to finish")
        # Every run the restarted slurmctld ended is billed once its spool
        # file is stored.  (Not "a bill for every task": a task split off the
        # array after the last state save and running at the kill is forgotten
        # by the restarted slurmctld, never run again and never billed; it
        # is a runaway in slurmdbd and the journal names it, below.)
        c.wait_for("the spool to drain", lambda: spool_drained(c), timeout=120, interval=1)
        sigkill_then_reconcile(c, jobid, markers, start, t_kill, t_up)
    finally:
        restart_cluster_clean(c)


def sigkill_then_reconcile(c, jobid, markers, start, t_kill, t_up):
    end = int(time.time()) + 5
    r = bill_tool(c, "reconcile", "-S", str(start), "-E", str(end), user=None)
    print(r.stdout, r.stderr)
    # A run that began after slurmctld's last state save and ended while it
    # was down never reaches jobcomp: the restarted slurmctld does not know
    # it ran.  slurmdbd may, and reconcile lists it.  Only such runs may be
    # missing: each started inside the crash window.
    missing = re.findall(r"missing: job (\d+) start (\S+ \S+?)\+00", r.stdout)
    counted = re.search(r" (\d+) without a bill", r.stdout)
    assert counted and int(counted.group(1)) == len(missing), r.stdout  # every one checked
    for job, when in missing:
        assert t_kill - 60 <= utc_seconds(when) <= t_up, \
            f"job {job} started at {when}, outside the crash window"
    fill = bill_tool(c, "reconcile", "-S", str(start), "-E", str(end), "--fill", user=None)
    print(fill.stdout)
    # Every run that reached a node is billed, in slurmdbd, or named by the
    # run-start journal; once slurmdbd has had a minute, reconcile says so.
    counts, again = wait_all_runs_accounted_for(c, markers, jobid, (start, end))
    assert r.returncode in (0, 3), r.stdout + r.stderr
    # After an admin's `reconcile --fill` for the crash window, nothing is
    # without a bill; what is left are runs only the journal knows, which
    # no one can bill without their end.
    assert " 0 without a bill" in again.stdout, again.stdout
    assert again.returncode == (3 if counts["journal only"] else 0), again.stdout


def test_slurmctld_sigkill_as_runs_launch_journal_names_every_hidden_run(c):
    """slurmctld SIGKILLed within about a second of launching a new array's
    runs: the restarted controller may know the array as pending (it runs
    it again) or not at all, and slurmdbd never heard of those first runs.
    Every one of them that reached a node is named by the run-start journal
    (reconcile's "unrecorded")."""
    start = int(time.time()) - 5
    jobid, markers = marked_array(c, "0-23", "sleep 20")
    c.wait_for("the first run on a node", lambda: os.path.getsize(markers) > 0, interval=0.05)
    sigkill_slurmctld(c)
    up = c.ctl("up", check=False, timeout=300)
    assert up.returncode == 0, up.stderr
    # Tasks held after a refused launch ("Duplicate jobid") are released as
    # an admin would (all_done); drained nodes are resumed at the end.
    try:
        all_done(c, jobid, "the array to end")
        end = int(time.time()) + 5
        counts, _ = wait_all_runs_accounted_for(c, markers, jobid, (start, end))
    finally:
        restart_cluster_clean(c)
    assert counts["reached nodes"] >= 1 and counts["lost"] == 0


def test_report_totals_by_account_user_tier_and_hour(c):
    jobid, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--gres=gpu:1", "--wrap", "sleep 2",
                        user="pcbob")
    wait_bills(c, jobid, 1)
    wait_hours_counted(c)
    out = bill_tool(c, "report", "--by", "account,user,tier", "--json", user="pcbob")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert rows and {r["User"] for r in rows} == {"pcbob"}
    # Each line is the exact sum of its bills, rounded once to cents.
    exact = {(a, t): int(m) for a, t, m in psql(
        c, "SELECT account, tier, sum(amount_micros) FROM planc.bill WHERE user_name = 'pcbob'"
           " GROUP BY account, tier")}
    assert {(r["Account"], r["Tier"]): (round(r["AmountExact"] * 10**6), round(r["Amount"] * 100))
            for r in rows} == {k: (m, (m + 5000) // 10000) for k, m in exact.items()}
    table = bill_tool(c, "report", "--by", "day,tier", user="pcbob")
    assert table.returncode == 0 and "TOTAL" in table.stdout, table.stderr
    print(table.stdout)
    # TOTAL is the sum of the printed (rounded) lines, as on an invoice.
    lines = [l.split() for l in table.stdout.splitlines()[2:]]
    assert lines[-1][0] == "TOTAL"
    assert sum(round(float(l[-1]) * 100) for l in lines[:-1]) == round(float(lines[-1][-1]) * 100)
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
    env = user_env(c)
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
    assert int(b["billable_seconds"]) >= 1 and int(b["amount_micros"]) > 0 and b["zero_reason"] == ""
    assert [r[4] for r in sacct_c(c, "pcbob", "-j", jobid)] == ["REQUEUED"]


def test_exit_codes_in_bills_are_what_sacct_shows(c):
    exited, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "exit 143", user="pcbob")
    killed, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "kill -9 $$", user="pcbob")
    assert exited and killed
    env = user_env(c)
    # wait status, WEXITSTATUS, WTERMSIG, sacct's ExitCode
    for jobid, want in ((exited, ("36608", "143", "0", "15:0")), (killed, ("9", "0", "9", "0:9"))):
        (b,) = wait_bills(c, jobid, 1)
        shown = c.wait_for("sacct's ExitCode", lambda: c.sacct_field(jobid, "ExitCode") or None)
        print(jobid, "bill:", [b[k] for k in ("wait_status", "exit_status", "exit_signal",
                                              "exit_code")], "sacct:", shown)
        assert shown == want[3]
        assert (b["wait_status"], b["exit_status"], b["exit_signal"], b["exit_code"]) == want
        # sacct -c (the bills) prints the same ExitCode as plain sacct.
        p = c.run("sacct", "-c", "-n", "-P", "-j", jobid, "-o", "ExitCode", user="pcbob", env=env)
        assert p.stdout.strip() == shown, p.stderr
        out = bill_tool(c, "list", "-j", jobid, "--json", user="pcbob")
        assert [r["ExitCode"] for r in json.loads(out.stdout)] == [shown]


def test_planc_bill_reads_like_sacct_beside_sacct(c):
    """planc-bill takes sacct's output options and job ids: -P/-p/-n/-o,
    array tasks (7_3), the job name, times in the reader's zone or --utc,
    and typed JSON; its JobIDs are the ones sacct prints for the same jobs."""
    name = 'x,y "q"|z'
    arr, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--array=0-1", "-J", name,
                      "--wrap", "sleep 1", user="pcbob")
    assert arr, p.stderr
    c.wait_for("bills of both array tasks",
               lambda: len(bills(c, f"array_job_id = {int(arr)}")) >= 2 or None, timeout=90)
    # sacct (slurmdbd) and planc-bill, the same options, the same JobIDs.
    # (slurmctld tells slurmdbd asynchronously: wait until it lists both.)
    sacct = c.wait_for("slurmdbd to list both tasks", lambda: (lambda l: l if len(l) == 2 else None)(
        c.run("sacct", "-X", "-P", "-n", "-o", "JobID,QOS", "-j", arr, user="pcbob",
              check=True).stdout.splitlines()))
    out = bill_tool(c, "-P", "-n", "-o", "JobID,Tier,Amount", "-j", arr, user="pcbob")
    assert out.returncode == 0, out.stderr
    print("sacct:", sacct, "\nplanc-bill:", out.stdout.splitlines())
    mine = [l.split("|") for l in out.stdout.splitlines()]
    assert sorted(r[0] for r in mine) == sorted(l.split("|")[0] for l in sacct) == \
        [f"{arr}_0", f"{arr}_1"]
    assert all(r[1] == "P3" and re.fullmatch(r"\d+\.\d{6}", r[2]) for r in mine), mine
    # -p ends each line with the delimiter; without -n the header comes first.
    out = bill_tool(c, "list", "-p", "-o", "jobid,tier", "-j", f"{arr}_1", user="pcbob")
    assert out.stdout.splitlines() == ["JobID|Tier|", f"{arr}_1|P3|"], out.stdout
    # JSON: the name as submitted, the id as text, the amount a number.
    out = bill_tool(c, "--json", "-o", "JobID,JobName,Amount,Start", "-j", f"{arr}_0",
                    user="pcbob")
    (row,) = json.loads(out.stdout)
    assert row["JobID"] == f"{arr}_0" and row["JobName"] == name, row
    assert isinstance(row["Amount"], (int, float)), row
    # Local time by default (as sacct), UTC with --utc: the same instant.
    shanghai = bill_tool(c, "-P", "-n", "-o", "Start", "-j", f"{arr}_0", user="pcbob",
                         tz="Asia/Shanghai").stdout.strip()
    utc = bill_tool(c, "-P", "-n", "-o", "Start", "-j", f"{arr}_0", "--utc",
                    user="pcbob").stdout.strip()
    parse = lambda t: datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S")
    assert parse(shanghai) - parse(utc) == datetime.timedelta(hours=8), (shanghai, utc)
    assert row["Start"].endswith("Z") or row["Start"][-6] in "+-", row
    # A field that does not exist is a usage error that names the fields.
    bad = bill_tool(c, "-o", "JobID,Planet", user="pcbob")
    assert bad.returncode == 2 and "no field 'Planet'" in bad.stderr and "JobName" in bad.stderr


def bills_raw(c, jobids):
    """Bills of `jobids` keyed by job id; the job name hex-encoded, since it
    may hold newlines and the field separator."""
    rows = psql(c, "SELECT job_id, user_name, account, source, state, wait_status, exit_code,"
                   " amount_micros, note, encode(convert_to(job_name, 'UTF8'), 'hex')"
                   " FROM planc.bill WHERE job_id = ANY(string_to_array(:'p0', ',')::bigint[])",
                ",".join(jobids))
    keys = ("job_id", "user_name", "account", "source", "state", "wait_status", "exit_code",
            "amount_micros", "note", "job_name")
    out = {}
    for r in rows:
        b = dict(zip(keys, r))
        b["job_name"] = bytes.fromhex(b["job_name"]).decode()
        out[b["job_id"]] = b
    return out


def spoil_spool_records(c, jobs):
    """Spoils every spool record of `jobs` in the closed spool files (all
    but the newest, which slurmctld appends to); True once all are found."""
    d = spool_dir(c)
    found = set()
    for f in spool_files(c)[:-1]:
        path = os.path.join(d, f)
        lines = open(path, "rb").read().split(b"\n")
        for i, line in enumerate(lines):
            fields = line.split(b"\t")
            if len(fields) > 2 and fields[2].decode() in jobs:
                found.add(fields[2].decode())
                if line.startswith(b"planc-seg-2\t"):
                    lines[i] = b"planc-seg-X" + line[len(b"planc-seg-2"):]
        with open(path, "r+b") as out:  # same size, in place
            out.write(b"\n".join(lines))
    return found == set(jobs)


def test_reconcile_reads_records_not_text_a_crafted_name_forges_nothing(c):
    """A job name can hold a newline and sacct's delimiter.  Once (text
    read from `sacct -P`) the name below planted a bill for pcalice, and a
    \\x1f in a name hid its run from reconcile.  Reconcile reads slurmdbd's
    records through libslurmdb: only real runs, with their real owners."""
    t0 = int(time.time()) - 5
    now = int(time.time())
    alice = pwd.getpwnam("pcalice").pw_uid
    tres = "billing=8,cpu=8,gres/gpu=8,mem=8G,node=1"
    # The fields reconcile used to ask sacct for, in its order: a whole
    # record of pcalice's (P0, 8 GPUs, 3,540 s), after a newline.
    forged = "\x1f".join(["990001", "planc", "990001", str(now - 3600), str(now - 3600),
                          str(now - 60), "00:00:00", str(alice), "pcalice", "acct-lease",
                          "p0-lease", "gpu", "gpu1", "1", "COMPLETED", "0:0", tres, tres, "8", "",
                          "forged"])
    names = ["x\n" + forged, "a\x1fb\x1fc", "naïve 名字 run"]
    # Their bills are lost on the way, as when a spool line is damaged:
    # with PostgreSQL down the spool files wait, and each record of these
    # jobs is spoiled (its checksum no longer matches: jobcomp logs and
    # skips it).  reconcile must find all three runs in slurmdbd.
    pg_ctl(c, "stop")
    jobs = {}
    try:
        for name in names:
            jobid, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "-J", name, "--wrap", "exit 3",
                                user="pcbob")
            assert jobid, p.stderr
            jobs[jobid] = name
        spoiled = c.wait_for("the runs' records in closed spool files",
                             lambda: spoil_spool_records(c, jobs), timeout=120)
        print("spoiled spool records:", spoiled)
    finally:
        up = c.ctl("up", check=False, timeout=300)
        assert up.returncode == 0, up.stderr
    c.wait_for("the spool to drain", lambda: len(spool_files(c)) <= 1, timeout=120)
    assert bills_raw(c, jobs) == {}
    c.wait_for("slurmdbd to record the runs' ends", lambda: all(
        c.sacct_field(j, "State") == "FAILED" for j in jobs), timeout=60)
    window = ("-S", str(t0), "-E", str(int(time.time()) + 5))
    # slurmdbd takes a run's records asynchronously: `sacct -j` can show the
    # end before a query by time window finds the run (seen in CI).  Wait
    # until reconcile reports as many runs missing as were spoiled; if it
    # never does, the assertions below say what it reported.
    def reconciled():
        r = bill_tool(c, "reconcile", *window)
        return r if r.stdout.count("missing: job ") >= len(jobs) else None
    try:
        r = c.wait_for("reconcile to see the runs in slurmdbd", reconciled, timeout=60, interval=2)
    except AssertionError:
        r = bill_tool(c, "reconcile", *window)
    print(r.stdout, r.stderr)
    missing = re.findall(r"missing: job (\d+) start \S+ \S+ (\S+) user (\S+) account (\S+)",
                         r.stdout)
    assert r.returncode == 3, r.stdout + r.stderr
    assert sorted(m[0] for m in missing) == sorted(jobs), "every run found, none forged or hidden"
    assert {(m[1], m[2], m[3]) for m in missing} == {("FAILED", "pcbob", "acct-spot")}
    assert "990001" not in r.stdout and "pcalice" not in r.stdout
    fill = bill_tool(c, "reconcile", *window, "--fill")
    print(fill.stdout, fill.stderr)
    assert fill.returncode == 0 and "filled 3 bill(s)" in fill.stdout, fill.stdout + fill.stderr
    (forged_rows,) = psql(c, "SELECT count(*) FROM planc.bill WHERE job_id = 990001"
                             " OR (source = 'reconcile' AND user_name <> 'pcbob'"
                             "     AND recorded_at >= to_timestamp(:'p0'))", t0)
    assert forged_rows == ["0"], "nothing filled for anyone but the runs' owner"
    filled = bills_raw(c, jobs)
    assert sorted(filled) == sorted(jobs)
    for jobid, name in jobs.items():
        b = filled[jobid]
        assert (b["user_name"], b["account"], b["source"], b["state"]) == \
            ("pcbob", "acct-spot", "reconcile", "FAILED")
        # The exit code, as sacct shows it, and the whole name.
        assert (b["wait_status"], b["exit_code"]) == ("768", c.sacct_field(jobid, "ExitCode"))
        assert b["exit_code"] == "3:0"
        if name.isascii():
            assert b["job_name"] == name
            assert "'?'" not in b["note"]
        else:
            # slurmdbd keeps Latin-1 and turns the rest into '?'; the note says so.
            assert b["job_name"] == "naïve ?? run"
            assert "slurmdbd keeps a '?' for each character its database cannot hold" in b["note"]


def hour_slices(start, end, micros):
    """planc's split of a bill over clock hours (common/billing.h): floor
    rule, so the slices add up to the bill."""
    wall, h = end - start, start - start % 3600
    if wall <= 0:
        return {h: micros}
    out = {}
    while h < end:
        a, z = max(h, start) - start, min(h + 3600, end) - start
        out[h] = micros * z // wall - micros * a // wall
        h += 3600
    return out


def test_short_runs_are_billed_exactly_and_rounded_once_per_invoice_line(c):
    """40 one-second P3 runs on one GPU: each bill is about 0.002-0.004 CNY.
    Rounded per bill to fen they were all 0.00; the report sums the exact
    amounts and rounds each line once."""
    t0 = int(time.time())
    jobid, p = c.sbatch("-A", "acct-nodefault", "--qos=p3-spot", "--gres=gpu:1", "--array=0-39%20",
                        "--wrap", "sleep 1", user="pccarol")
    assert jobid, p.stderr
    all_done(c, jobid, "40 short runs to finish")
    rows = c.wait_for("40 bills", lambda: (lambda r: r if len(r) >= 40 else None)(psql(
        c, "SELECT amount_micros, amount_minor, zero_reason, billable_seconds FROM planc.bill"
           " WHERE array_job_id = :'p0' AND state = 'COMPLETED'", jobid)), timeout=120)
    micros = sum(int(r[0]) for r in rows)
    per_bill_cents = sum(int(r[1]) for r in rows)
    print(f"{len(rows)} bills: exact {micros} micro-CNY; rounded per bill {per_bill_cents} fen")
    assert all(int(r[0]) > 0 and r[2] == "" for r in rows if int(r[3]) > 0)
    assert all(r[2] != "" for r in rows if int(r[0]) == 0), "a zero bill says why"
    assert per_bill_cents == sum((int(r[0]) + 5000) // 10000 for r in rows), \
        "amount_minor is each bill alone rounded half up"
    # On a loaded machine a 1 s run can take 2-3 s and its bill reach half a
    # fen: the loss shows only when every bill is under it.
    if all(int(r[0]) < 5000 for r in rows):
        assert per_bill_cents < (micros + 5000) // 10000, "rounding per bill would lose money"
    # No bill anywhere is 0 without a reason.
    assert psql(c, "SELECT count(*) FROM planc.bill WHERE amount_micros = 0 AND zero_reason = ''") \
        == [["0"]]
    # The report's lines: one per hour, each the exact sum rounded once.
    wait_hours_counted(c)
    h0, end = t0 - t0 % 3600, int(time.time()) + 1
    expected = {}
    for start, stop, m in psql(
            c, "SELECT extract(epoch FROM start_time)::bigint, extract(epoch FROM end_time)::bigint,"
               " amount_micros FROM planc.bill WHERE user_name = 'pccarol'"
               " AND account = 'acct-nodefault' AND tier = 'P3'"
               " AND end_time >= to_timestamp(:'p0')", h0):
        for h, part in hour_slices(int(start), int(stop), int(m)).items():
            if h0 <= h < end:
                expected[h] = expected.get(h, 0) + part
    out = bill_tool(c, "report", "--by", "account,user,tier,hour", "-u", "pccarol", "-A",
                    "acct-nodefault", "-S", str(h0), "-E", str(end), "--json", "--utc",
                    user="pccarol")
    assert out.returncode == 0, out.stderr
    lines = [l for l in json.loads(out.stdout) if l["Tier"] == "P3"]
    print(lines)
    got = {l["Hour"]: (round(l["AmountExact"] * 10**6), round(l["Amount"] * 100))
           for l in lines}
    want = {time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(h)): (m, (m + 5000) // 10000)
            for h, m in expected.items()}
    assert got == want


def test_migration_0002_backfills_bills_stored_before_it(c):
    """Bills and hourly rows written under schema 0001 get the exit columns
    and micro-unit amounts; a zero bill gets its reason."""
    db = "planc_migration_test"
    sql = os.path.join(ROOT, "sql")

    def run(*args, **kw):
        p = subprocess.run(["psql", "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-U", "postgres",
                            *args], capture_output=True, text=True, env=c.env, timeout=120, **kw)
        assert p.returncode == 0, p.stderr
        return p.stdout
    run("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")
    run("-d", "postgres", "-c", f"CREATE DATABASE {db}")
    try:
        run("-d", db, "-1", "-f", os.path.join(sql, "0001_billing.sql"))
        row = ("'planc', {id}, to_timestamp({id}), to_timestamp({id} + 10), 0, NULL, NULL, NULL,"
               " NULL, NULL, 1, 'u', 'a', 'P3', 'p3-spot', 'gpu', 'gpu1', 1, 'FAILED', {ec}, 'j',"
               " '', '', 1, 100, 1, '', 10, 10, 10, 1, 'CNY', 20, 0.1, 0.01, 0.4, {amount}, '',"
               " '', '', 'jobcomp'")
        run("-d", db, "-c", "INSERT INTO planc.bill VALUES (" + row.format(id=1, ec=36608, amount=5)
            + "), (" + row.format(id=2, ec=9, amount=0) + ");"
            " INSERT INTO planc.usage_hourly VALUES (to_timestamp(0), 'planc', 'a', 'u', 'P3',"
            " 20, 20, 2, 5, 2)")
        run("-d", db, "-1", "-f", os.path.join(sql, "0002_exact_amounts_exit_codes.sql"))
        got = run("-d", db, "-F", "|", "-c",
                  "SELECT job_id, wait_status, exit_status, exit_signal, exit_code, amount_micros,"
                  " amount_minor, zero_reason <> '', note <> '' FROM planc.bill ORDER BY job_id")
        assert got.split() == ["1|36608|143|0|15:0|50000|5|f|t", "2|9|0|9|0:9|0|0|t|f"]
        # Hourly rows: micro-units kept, cents rounded once from them.
        run("-d", db, "-c", "INSERT INTO planc.usage_hourly (hour, cluster, account, user_name,"
            " tier, card_seconds, core_seconds, mem_gib_seconds, amount_micros, segments) VALUES"
            " (to_timestamp(3600), 'planc', 'a', 'u', 'P3', 0, 0, 0, 14999, 3),"
            " (to_timestamp(7200), 'planc', 'a', 'u', 'P3', 0, 0, 0, 15000, 3)")
        got = run("-d", db, "-F", "|", "-c", "SELECT amount_micros, amount_minor FROM"
                  " planc.usage_hourly ORDER BY hour")
        assert got.split() == ["50000|5", "14999|1", "15000|2"]
        # A zero bill without a reason is refused from now on.
        bad = subprocess.run(["psql", "-X", "-U", "postgres", "-d", db, "-c",
                              "UPDATE planc.bill SET zero_reason = '' WHERE job_id = 2"],
                             capture_output=True, text=True, env=c.env, timeout=60)
        assert bad.returncode != 0 and "bill_zero_has_reason" in bad.stderr
    finally:
        run("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")


def test_migration_0009_moves_every_row_into_its_month_and_keeps_the_rules(c):
    """Bills, rounds and bids stored under schema 0008 move into month
    partitions (UTC months, by start_time and round_at) with nothing lost;
    afterwards a stored bill is still dropped when written again, a bill of
    a month without a partition is stored in the default one and moved into
    its month when the month is made, a reader still sees only their own
    bills, and a month detached for archiving leaves the hourly totals."""
    db = "planc_migration9_test"
    sql = os.path.join(ROOT, "sql")

    def run(*args, user="postgres", ok=True):
        # A Slurm user connects as themselves (peer authentication).
        who = [] if user == "postgres" else ["runuser", "-u", user, "--"]
        p = subprocess.run(who + ["psql", "-X", "-q", "-t", "-A", "-F", "|", "-v",
                                  "ON_ERROR_STOP=1", "-U", user, *args],
                           capture_output=True, text=True, env=c.env, timeout=120, cwd="/tmp")
        assert (p.returncode == 0) == ok, p.stderr
        return p.stdout if ok else p.stderr

    run("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")
    run("-d", "postgres", "-c", f"CREATE DATABASE {db}")
    try:
        for f in sorted(os.listdir(sql)):
            if re.match(r"000[1-8]_.*\.sql$", f):
                run("-d", db, "-1", "-f", os.path.join(sql, f))
        # 3,000 bills over three months (2025-01, 2025-12, 2026-11), two
        # rounds with three bids in two more, and their hourly totals.
        run("-d", db, "-c", INSERT_BILL + """
          SELECT 'planc', i, t, t + interval '10 min', 0, 1000,
            CASE WHEN i % 100 = 0 THEN 'pcbob' ELSE 'pc' || (i % 3) END, 'a', 'P3',
            'p3-spot', 'gpu', 'n1', 1, 'COMPLETED', 0, 0, 0, '0:0', 'j', '', '', 1, 100, 1, '',
            600, 600, 600, 1, 'CNY', 20, 0.1, 0.01, 0.4, 1, 10000, '', '', '', 'jobcomp'
          FROM (SELECT i, timestamptz '2025-01-15 00:00Z' + (i % 3) * interval '330 days'
                          + i * interval '1 s' AS t FROM generate_series(1, 3000) i) s;
          INSERT INTO planc.usage_hourly (hour, cluster, account, user_name, tier, card_seconds,
            core_seconds, mem_gib_seconds, amount_micros, segments)
          SELECT date_trunc('hour', start_time), cluster, account, user_name, tier,
            sum(card_seconds), sum(core_seconds), sum(mem_gib_seconds), sum(amount_micros), count(*)
          FROM planc.bill GROUP BY 1, 2, 3, 4, 5;
          INSERT INTO planc.market_round (cluster, round_at, gpu_type, capacity_gpus,
            allocated_gpus, vacancy_permille, floor_micros, list_micros, clearing_micros, bids,
            winners)
          VALUES ('planc', '2026-11-30 23:45Z', 'default', 8, 2, 500, 1, 2, 1, 2, 1),
                 ('planc', '2026-10-01 00:00Z', 'default', 8, 0, 500, 1, 2, NULL, 1, 0);
          INSERT INTO planc.market_bid (cluster, round_at, gpu_type, job_id, user_name, account,
            bid_micros, gpus, submitted, outcome, pays_micros)
          VALUES ('planc', '2026-11-30 23:45Z', 'default', 5, 'pc1', 'a', 2, 1, now(), 'won', 1),
                 ('planc', '2026-11-30 23:45Z', 'default', 6, 'pc2', 'a', 1, 1, now(), 'outbid', 0),
                 ('planc', '2026-10-01 00:00Z', 'default', 7, 'pc1', 'a', 1, 1, now(),
                  'below floor', 0);""")
        totals = "SELECT sum(amount_micros), sum(segments), count(*) FROM planc.usage_hourly"
        before = run("-d", db, "-c", totals)
        run("-d", db, "-1", "-f", os.path.join(sql, "0009_partition_by_month.sql"))
        where = run("-d", db, "-c", """
          SELECT tableoid::regclass, count(*) FROM planc.bill GROUP BY 1
          UNION ALL SELECT tableoid::regclass, count(*) FROM planc.market_round GROUP BY 1
          UNION ALL SELECT tableoid::regclass, count(*) FROM planc.market_bid GROUP BY 1""").split()
        where.sort()
        assert where == ["planc.bill_2025_01|1000", "planc.bill_2025_12|1000",
                         "planc.bill_2026_11|1000", "planc.market_bid_2026_10|1",
                         "planc.market_bid_2026_11|2", "planc.market_round_2026_10|1",
                         "planc.market_round_2026_11|1"], where
        assert run("-d", db, "-c", totals) == before
        assert run("-d", db, "-c", "SELECT relkind FROM pg_class WHERE oid = 'planc.bill'::regclass"
                   ).strip() == "p"
        # Exactly once: the same key again is dropped.
        assert run("-d", db, "-c", """
          INSERT INTO planc.bill SELECT * FROM planc.bill WHERE job_id = 1
          ON CONFLICT (cluster, job_id, start_time) DO NOTHING RETURNING job_id""").strip() == ""
        # A month with no partition yet: stored in the default, moved when made.
        run("-d", db, "-c", """
          CREATE TEMP TABLE x AS SELECT * FROM planc.bill WHERE job_id = 3;
          UPDATE x SET start_time = '2031-05-02Z', end_time = '2031-05-02 01:00Z';
          INSERT INTO planc.bill SELECT * FROM x;""")
        assert run("-d", db, "-c", "SELECT count(*) FROM planc.bill_default").strip() == "1"
        assert run("-d", db, "-c", "SELECT planc.ensure_month('2031-05-20Z')").strip() == "3"
        assert run("-d", db, "-c", "SELECT tableoid::regclass FROM planc.bill"
                   " WHERE start_time = '2031-05-02Z'").strip() == "planc.bill_2031_05"
        assert run("-d", db, "-c", "SELECT count(*) FROM planc.bill_default").strip() == "0"
        # The writer may make the months (jobcomp/planc calls it), a reader may not.
        privs = run("-d", db, "-c", """
          SELECT has_function_privilege('planc_writer', 'planc.ensure_months(integer)', 'EXECUTE'),
                 has_function_privilege('planc_reader', 'planc.ensure_months(integer)', 'EXECUTE'),
                 has_table_privilege('planc_writer', 'planc.bill', 'INSERT'),
                 has_table_privilege('planc_reader', 'planc.bill_2025_01', 'SELECT'),
                 has_column_privilege('planc_writer', 'planc.bill', 'measured_at', 'UPDATE'),
                 has_column_privilege('planc_writer', 'planc.bill', 'amount_micros', 'UPDATE')""")
        assert privs.strip() == "t|f|t|f|t|f", privs
        # Row-level security through the parent: pcbob (a login role of the
        # test cluster, in planc_reader) sees his 30 bills of the 3,001; a
        # month's partition itself is closed to him.
        run("-d", db, "-c", "GRANT CONNECT ON DATABASE " + db + " TO planc_reader")
        assert run("-d", db, "-c", "SELECT count(*), min(user_name), max(user_name) FROM planc.bill",
                   user="pcbob").strip() == "30|pcbob|pcbob"
        assert "permission denied" in run("-d", db, "-c", "SELECT count(*) FROM planc.bill_2025_01",
                                          user="pcbob", ok=False)
        # Retention: detach a month, archive it, drop it; the hourly totals stay.
        run("-d", db, "-c", "ALTER TABLE planc.bill DETACH PARTITION planc.bill_2025_01")
        dump = subprocess.run(["pg_dump", "-U", "postgres", "-d", db, "-t", "planc.bill_2025_01"],
                              capture_output=True, text=True, env=c.env, timeout=120)
        assert dump.returncode == 0, dump.stderr
        run("-d", db, "-c", "DROP TABLE planc.bill_2025_01")
        copied = dump.stdout.split("COPY planc.bill_2025_01 ", 1)[1].split("\n\\.\n", 1)[0]
        assert len(copied.splitlines()) - 1 == 1000  # the COPY line, then a row per bill
        assert run("-d", db, "-c", "SELECT count(*) FROM planc.bill").strip() == "2001"
        assert run("-d", db, "-c", totals) == before
    finally:
        run("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")


def test_hours_are_counted_once_after_the_bills_are_stored(c):
    """Schema 11: bills stored under schema 10 keep their hourly totals and
    are not counted again; a bill stored afterwards is added by `planc-bill
    rollup`, split over its hours exactly as common/billing.h splits it
    (hour_slices; a run that never ran counts in its first hour only); a
    rollup waits for a bill writer still in its transaction and counts its
    bill too; a second rollup adds nothing; a bill of a writer that adds its
    hours itself (an older release) is never counted by a rollup; only the
    writer may number bills and move the rollup's state."""
    db = "planc_rollup_test"
    sql = os.path.join(ROOT, "sql")
    dsn = f"host={c.env['PGHOST']} port={c.env['PGPORT']} dbname={db} user=postgres"

    def run(*args, ok=True):
        p = subprocess.run(["psql", "-X", "-q", "-t", "-A", "-F", "|", "-v", "ON_ERROR_STOP=1",
                            "-U", "postgres", *args], capture_output=True, text=True, env=c.env,
                           timeout=120, cwd="/tmp")
        assert (p.returncode == 0) == ok, p.stderr
        return p.stdout

    def rollup():
        p = c.run(BILL_TOOL, "--db", dsn, "rollup")
        assert p.returncode == 0, p.stderr
        return p.stdout

    def behind():
        """planc-exporter's reading of the database (schema 12): the bills
        waiting for the hourly totals, and when bills were last added, with
        planc.rollup_state's own time."""
        p = subprocess.run([os.path.join(ROOT, "planc-exporter"), "--once", "--state-dir",
                            os.path.join(c.dir, "state", "ctld"), "--database", dsn],
                           capture_output=True, text=True, timeout=60, env=c.env)
        assert 'planc_exporter_source_up{source="database"} 1' in p.stdout, p.stdout + p.stderr
        m = dict(line.split(" ", 1) for line in p.stdout.splitlines()
                 if line.startswith("planc_") and "{" not in line)
        at = float(run("-d", db, "-c", "SELECT extract(epoch FROM at) FROM planc.rollup_state"))
        return (int(float(m["planc_bills_waiting_for_hourly_totals"])),
                float(m["planc_hourly_totals_updated_timestamp_seconds"]), at)

    # A bill: (job, start, end, card micro-seconds, core s, mem MiB-s, micros, reason)
    h = 1_796_000_400  # the start of an hour
    cases = [(1, h + 600, h + 1800, 7_200_000_000, 48, 8192, 1_000_003, ""),  # one hour
             (2, h + 1200, h + 9300, 8_100_000_001, 97, 65_537, 12_345_679, ""),  # three hours
             (3, h + 3000, h + 4800, 0, 0, 0, 0, "never ran"),  # counts in its first hour
             (4, h + 7200, h + 7200, 0, 0, 0, 0, "zero billable seconds")]  # no length

    def insert(job, start, end, card, core, mem, micros, reason, writer="this"):
        # This release's writer has its bills numbered; an older one (or a
        # bill made by hand) does not.
        return ("SET planc.hours_later = on;" if writer == "this" else "") + INSERT_BILL + f"""
          VALUES ('rolltest', {job}, to_timestamp({start}), to_timestamp({end}), 0, 1000,
            'pcbob', 'acct-spot', 'P3', 'p3-spot', 'gpu', 'n1', 1, 'COMPLETED', 0, 0, 0, '0:0',
            'j', '', '', 1, 100, 1, '', {max(end - start, 0)}, {card} / 1000000.0, {core},
            {mem} / 1024.0, 'CNY', 20, 0.1, 0.01, 0.4, ({micros} + 5000) / 10000, {micros},
            '{reason}', '', '', 'jobcomp');"""

    run("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")
    run("-d", "postgres", "-c", f"CREATE DATABASE {db}")
    try:
        for f in sorted(os.listdir(sql)):
            if re.match(r"00(0[1-9]|10)_.*\.sql$", f):
                run("-d", db, "-1", "-f", os.path.join(sql, f))
        # Under schema 10 a bill and its hours are stored together.
        run("-d", db, "-c", insert(100, h, h + 60, 1, 1, 1, 7, "") + """
          INSERT INTO planc.usage_hourly (hour, cluster, account, user_name, tier, card_seconds,
            core_seconds, mem_gib_seconds, amount_micros, segments)
          VALUES (to_timestamp(1796000400 - 1796000400 % 3600), 'rolltest', 'acct-spot',
                  'pcbob', 'P3', 0.000001, 1, 0.0009765625, 7, 1)""")
        totals = ("SELECT extract(epoch FROM hour)::bigint, (card_seconds * 1000000)::bigint,"
                  " core_seconds, (mem_gib_seconds * 1024)::bigint, amount_micros, segments"
                  " FROM planc.usage_hourly ORDER BY hour")
        before = run("-d", db, "-c", totals)
        run("-d", db, "-1", "-f", os.path.join(sql, "0011_hourly_rollup.sql"))
        run("-d", db, "-1", "-f", os.path.join(sql, "0012_metrics_hourly_totals.sql"))
        assert run("-d", db, "-c", "SELECT seq IS NULL FROM planc.bill").split() == ["t"]
        assert "rollup: 0 bill(s)" in rollup()
        waiting, exported_at, migrated_at = behind()
        assert waiting == 0 and abs(exported_at - migrated_at) < 1
        assert run("-d", db, "-c", totals) == before
        for case in cases:
            run("-d", db, "-c", insert(*case))
        # A writer of the release before adds its bills' hours itself: its
        # bill is not numbered, and no rollup counts it again.
        run("-d", db, "-c", insert(6, h, h + 60, 1, 1, 1, 7, "", writer="older"))
        assert run("-d", db, "-c", "SELECT job_id FROM planc.bill WHERE seq IS NULL"
                   " ORDER BY job_id").split() == ["6", "100"]
        # The exporter counts the numbered bills as waiting, not the others.
        assert behind()[0] == len(cases)
        # A writer in its transaction, its bill numbered and not committed:
        # the rollup waits for it, then counts its bill with the others.
        writer = subprocess.Popen(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-U", "postgres",
                                   "-d", db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=c.env, cwd="/tmp")
        last = (5, h + 5400, h + 5460, 60_000_000, 8, 60 * 1024, 3_334, "")
        writer.stdin.write("BEGIN;\n" + insert(*last) + "\n")
        writer.stdin.flush()
        c.wait_for("the writer's bill numbered in its open transaction", lambda: run(
            "-d", db, "-c", "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND mode = 'ShareLock'").strip() == "1", timeout=30, interval=0.1)
        folding = subprocess.Popen(
            [BILL_TOOL, "--db", dsn, "rollup"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=c.env, cwd="/tmp")
        c.wait_for("the rollup to wait for the writer", lambda: run(
            "-d", db, "-c", "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND NOT granted AND mode = 'ExclusiveLock'").strip() == "1", timeout=30,
            interval=0.1)
        assert folding.poll() is None
        writer.stdin.write("COMMIT;\n")
        writer.stdin.close()
        assert writer.wait(timeout=60) == 0, writer.stderr.read()
        out, err = folding.communicate(timeout=60)
        assert folding.returncode == 0, err
        assert "rollup: 5 bill(s)" in out, out
        waiting, exported_at, at = behind()
        assert waiting == 0 and abs(exported_at - at) < 1 and at > migrated_at
        # Each hour as common/billing.h splits the bills (the floor rule),
        # and the schema-10 bill's hour as it was.
        want = {}
        for job, start, end, card, core, mem, micros, reason in cases + [last]:
            slices = {start - start % 3600: None} if reason == "never ran" else None
            parts = [hour_slices(start, end, q) for q in (card, core, mem, micros)]
            for hr in (slices or parts[0]):
                row = want.setdefault(hr, [0, 0, 0, 0, 0])
                for i, part in enumerate(parts):
                    row[i] += part.get(hr, 0) if not slices else (card, core, mem, micros)[i]
                row[4] += 1
        old = dict((int(r.split("|")[0]), [int(x) for x in r.split("|")[1:]])
                   for r in before.split())
        for hr, row in old.items():
            want[hr] = [a + b for a, b in zip(want.get(hr, [0, 0, 0, 0, 0]), row)]
        got = {int(r.split("|")[0]): [int(x) for x in r.split("|")[1:]]
               for r in run("-d", db, "-c", totals).split()}
        assert got == want
        assert "rollup: 0 bill(s)" in rollup()
        assert {int(r.split("|")[0]): [int(x) for x in r.split("|")[1:]]
                for r in run("-d", db, "-c", totals).split()} == want
        privs = run("-d", db, "-c", """
          SELECT has_function_privilege('planc_writer', 'planc.next_bill_seq()', 'EXECUTE'),
                 has_function_privilege('planc_reader', 'planc.next_bill_seq()', 'EXECUTE'),
                 has_table_privilege('planc_writer', 'planc.rollup_state', 'UPDATE'),
                 has_table_privilege('planc_reader', 'planc.rollup_state', 'SELECT'),
                 has_sequence_privilege('planc_reader', 'planc.bill_seq', 'USAGE'),
                 has_function_privilege('planc_metrics', 'planc.metrics_rollup()', 'EXECUTE'),
                 has_function_privilege('planc_reader', 'planc.metrics_rollup()', 'EXECUTE')""")
        assert privs.strip() == "t|f|t|f|f|t|f", privs
    finally:
        run("-d", "postgres", "-c", f"DROP DATABASE IF EXISTS {db}")


def test_the_bill_writer_makes_a_missing_month_when_it_connects(c):
    """jobcomp/planc's bill writer makes the month partitions ahead when it
    connects (and once a day): with next month's partition gone and the
    writer's connection cut, the next bill is stored (the writer connects
    again) and the month is there again."""
    nxt = psql(c, "SELECT to_char(date_trunc('month', now() AT TIME ZONE 'UTC')"
                  " + interval '1 month', 'YYYY_MM')")[0][0]
    psql(c, f"DROP TABLE IF EXISTS planc.bill_{nxt}")
    assert psql(c, f"SELECT to_regclass('planc.bill_{nxt}') IS NULL") == [["t"]]
    psql(c, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = 'planc' AND usename <> 'postgres' AND pid <> pg_backend_pid()")
    job, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
    assert job, p.stderr
    wait_bills(c, job, 1, timeout=120)
    assert psql(c, f"SELECT to_regclass('planc.bill_{nxt}') IS NOT NULL") == [["t"]]


def test_a_window_long_ago_lists_the_runs_that_overlap_it_and_the_longest_run_stays_private(c):
    """A time window's query reads only the runs that ended by its end plus
    the user's longest run (planc.bill_longest, kept by a trigger on every
    insert): a 10-day run that spans the window is still listed, with the
    run inside it and not the one after it; planc.longest_run() tells a user
    their own longest run and anybody else's only as the cluster-wide
    longest; and every bill stored so far, the writer's COPYs included, is
    within its user's recorded longest."""
    insert = INSERT_BILL + """
      SELECT 'longtest', id, s::timestamptz, e::timestamptz, 0, 1000, u, 'acct-spot', 'P3',
        'p3-spot', 'gpu', 'n1', 1, 'COMPLETED', 0, 0, 0, '0:0', 'j', '', '', 1, 100, 1, '',
        1, 1, 1, 1, 'CNY', 20, 0.1, 0.01, 0.4, 1, 10000, '', '', '', 'jobcomp'
      FROM (VALUES (990000001, 'pcbob', '2024-03-01 00:00Z', '2024-03-11 00:00Z'),
                   (990000002, 'pcbob', '2024-03-05 10:00Z', '2024-03-05 11:00Z'),
                   (990000003, 'pcbob', '2024-03-20 10:00Z', '2024-03-20 11:00Z'),
                   (990000004, 'pcalice', '2024-01-01 00:00Z', '2024-01-21 00:00Z'),
                   (990000005, 'pclongest', '2024-01-01 00:00Z', '2024-02-10 00:00Z'))
           AS v(id, u, s, e)"""
    psql(c, "DELETE FROM planc.bill WHERE cluster = 'longtest'")
    try:
        psql(c, insert)
        out = bill_tool(c, "list", "-S", "2024-03-05T00:00:00", "-E", "2024-03-05T23:59:59",
                        "--utc", "-n", "-P", "-o", "JobID", user="pcbob")
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.split()) == ["990000001", "990000002"], out.stdout

        def longest(user, of):
            p = c.run("psql", "-X", "-q", "-t", "-A", "-U", user, "-d", "planc", "-c",
                      f"SELECT extract(epoch FROM planc.longest_run(ARRAY['{of}']))::bigint / 86400",
                      user=user, env=user_env(c))
            assert p.returncode == 0, p.stderr
            return int(p.stdout)

        assert longest("pcbob", "pcbob") == 10
        assert longest("pcalice", "pcalice") == 20
        assert longest("pcbob", "pcalice") == 40  # the cluster-wide longest, not pcalice's
        assert psql(c, """
          SELECT count(*) FROM (SELECT user_name, max(end_time - start_time) m
                                  FROM planc.bill GROUP BY user_name) b
          LEFT JOIN planc.bill_longest l USING (user_name)
          WHERE l.longest IS NULL OR l.longest < b.m""") == [["0"]]
    finally:
        psql(c, "DELETE FROM planc.bill WHERE cluster = 'longtest'")


def test_bill_column_table_is_what_the_migrations_create(c):
    """One column table (common/bill_schema.h) makes the COPY row, the
    SELECT, the spool record and sacct -c's fields; it must name exactly
    the columns, types and nullability the migrations give planc.bill."""
    out = bill_tool(c, "columns", "--csv")
    assert out.returncode == 0, out.stderr
    table = {(r["Column"], r["Type"], r["Nullable"]) for r in csv.DictReader(io.StringIO(out.stdout))}
    db = {tuple(r) for r in psql(
        c, "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
           " WHERE table_schema = 'planc' AND table_name = 'bill'")}
    print("only in the table:", sorted(table - db), "only in PostgreSQL:", sorted(db - table))
    assert table == db


def spool_records(d, jobid):
    """Spool files in `d` holding a record of `jobid` (field 2 of a line)."""
    found = []
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if f.endswith(".spool") and any(l.split(b"\t")[2:3] == [jobid.encode()]
                                        for l in open(os.path.join(d, f), "rb")):
            found.append(f)
    return found


def test_spool_dir_setting_moves_the_spool_and_nothing_is_left_behind(c):
    """SpoolDir= (planc.conf, read at start) puts the spool on another disk.
    Records left in the default place (StateSaveLocation/planc_jobcomp) are
    billed too."""
    default = spool_dir(c)
    local = os.path.join(c.dir, "spool-local")
    try:
        pg_ctl(c, "stop")
        try:
            before, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
            assert before, p.stderr
            c.wait_for("its record in the default spool", lambda: spool_records(default, before))
            c.set_planc_conf([f"SpoolDir={local}"])  # restarts slurmctld
            after, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
            assert after, p.stderr
            c.wait_for("its record in SpoolDir", lambda: spool_records(local, after), timeout=90)
            assert not spool_records(default, after)
            assert stat.S_IMODE(os.stat(local).st_mode) == 0o700
        finally:
            up = c.ctl("up", check=False, timeout=300)
            assert up.returncode == 0, up.stderr
        wait_bills(c, before, 1, timeout=120)
        wait_bills(c, after, 1, timeout=120)
        c.wait_for("both records stored and their files removed",
                   lambda: not spool_records(default, before) and not spool_records(local, after))
    finally:
        c.set_planc_conf([])  # back to the default place
    last, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
    wait_bills(c, last, 1, timeout=120)


def test_bill_postgres_refuses_is_set_aside_and_the_others_flow(c):
    """A bill PostgreSQL refuses as data (here: a constraint an admin added)
    is set aside in <spool>.rejected with an error in slurmctld's log; the
    next bills arrive as usual, and reconcile --fill writes it once the
    cause is gone."""
    t0 = int(time.time()) - 5
    name = f"planc-refuse-{time.time_ns()}"
    psql(c, f"ALTER TABLE planc.bill ADD CONSTRAINT test_refuse CHECK (job_name <> '{name}') NOT VALID")
    log = c.log_offset()
    try:
        refused, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "-J", name, "--wrap", "true",
                              user="pcbob")
        assert refused, p.stderr
        other, _ = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--wrap", "true", user="pcbob")
        wait_bills(c, other, 1)
        d = spool_dir(c)
        rejected = c.wait_for("the refused record set aside", lambda: [
            f for f in os.listdir(d) if f.endswith(".rejected")
            and name.encode() in open(os.path.join(d, f), "rb").read()], timeout=60)
        said = c.wait_for("the error in slurmctld's log, on one line", lambda: re.search(
            rf"error: jobcomp/planc: PostgreSQL refused the bill of JobId={refused} start [^\n]*"
            rf"test_refuse[^\n]*record kept in {re.escape(d)}/{rejected[0]}, fix and replay it with "
            r"planc-bill reconcile --fill", c.log_since(log)))
        print(said.group(0))
        assert bills(c, f"job_id = {int(refused)}") == []
    finally:
        psql(c, "ALTER TABLE planc.bill DROP CONSTRAINT IF EXISTS test_refuse")
    c.wait_for("slurmdbd's record of the run", lambda: c.sacct_field(refused, "State") == "COMPLETED")
    # slurmdbd may list the run a moment after sacct shows its state (seen
    # once in CI: "1 run segment(s) in slurmdbd"): fill until it is there.
    def filled():
        fill = bill_tool(c, "reconcile", "-S", str(t0), "-E", str(int(time.time()) + 5), "--fill")
        print(fill.stdout)
        return bills(c, f"job_id = {int(refused)}")
    (b,) = c.wait_for("reconcile --fill to write the bill", filled, timeout=60, interval=2)
    assert (b["source"], b["job_name"]) == ("reconcile", name)
