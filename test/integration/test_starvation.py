"""slurmctld/planc's starvation upgrade on the private cluster, as users see it.

planc.conf here: a P3 job waiting more than 4 s (instead of 30 min) for the
cluster gets a free attempt as P2, checked every second; free attempts may
hold half the GPUs together (two 8-GPU jobs); P2's grace is 3 s so a
preemption does not take 30 s.  The module restores the example planc.conf
when it is done.
"""
import os
import re
import time

import pytest

from test_billing import wait_bills
from test_preempt import STUBBORN  # a job that traps SIGTERM and keeps running

P2_LINE = ("Tier=P2 QOS=p2-spot Aliases=p2,plan-a-spot,elastic Priority=5000 Preemptible=yes "
           "Preempts=P3 GraceTime=3 PriceFactor=0.35")
MARK = re.compile(r"\[planc:free-attempt\] upgraded from P3 \(p3-spot\) to P2 \(p2-spot\) at "
                  r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ after \d+ s waiting for (Resources|Priority); "
                  r"this attempt is not billed")


@pytest.fixture(scope="module")
def starving(cluster):
    # 8-GPU jobs on 32 GPUs: a free attempt is 25% (the default share 10%).
    cluster.reload_planc_conf(["StarvationThreshold=4s", "StarvationInterval=1s",
                               "StarvationMaxPercent=50", P2_LINE])
    cluster.stubborn = cluster.write_script("stubborn.sh", STUBBORN.format(work=cluster.work))
    yield cluster
    cluster.cancel_all()
    cluster.reload_planc_conf([])


@pytest.fixture
def c(starving):
    starving.cancel_all()
    yield starving
    starving.cancel_all()


def submit(c, user, account, qos, *extra):
    jobid, p = c.sbatch("-A", account, f"--qos={qos}", "--gres=gpu:8", "-N1", *extra, c.stubborn,
                        user=user)
    assert jobid, p.stderr
    return jobid


def fill_with_p2(c):
    ids = [submit(c, "pcbob", "acct-spot", "p2") for _ in range(4)]
    c.wait_for("the P2 jobs to fill the cluster",
               lambda: all(c.state(j) == "RUNNING" for j in ids), timeout=60)
    return ids


def qos(c, jobid):
    return c.squeue_field(jobid, "%q")


def admin_comment(c, jobid, user="pcbob"):
    text = c.run("scontrol", "show", "job", jobid, user=user, check=True).stdout
    m = re.search(r"AdminComment=(.*)", text)
    return m.group(1).strip() if m else ""


def log_since(c, offset):
    return c.log_since(offset)


def log_size(c):
    return c.log_offset()


def scans(c):
    out = c.run("scontrol", "show", "config", check=True).stdout
    return int(re.search(r"^\s*ScanCount\s*=\s*(\d+)", out, re.M).group(1))


def starvation_scans_ran(c, n=2):
    """Waits until slurmctld/planc's starvation scan has run n more times."""
    start = scans(c)
    c.wait_for(f"{n} starvation scans", lambda: scans(c) >= start + n, timeout=30)


def upgraded_and_running(c):
    """A P3 job starved by P2 work, upgraded, then started on a freed node."""
    fillers = fill_with_p2(c)
    job = submit(c, "pcbob", "acct-spot", "p3")
    c.wait_for("the starving P3 job to be upgraded", lambda: qos(c, job) == "p2-spot", timeout=40)
    c.end_now(fillers[0])
    c.wait_for("the upgraded job to start", lambda: c.state(job) == "RUNNING", timeout=60)
    return job, fillers


def test_starved_p3_job_is_upgraded_and_starts_held_and_dependent_are_not(c):
    at = log_size(c)
    fillers = fill_with_p2(c)
    starved = submit(c, "pcbob", "acct-spot", "p3")
    held = submit(c, "pcbob", "acct-spot", "p3", "--hold")
    dependent = submit(c, "pcbob", "acct-spot", "p3", f"--dependency=afterok:{fillers[1]}")
    t0 = time.time()
    c.wait_for("the starving P3 job to be upgraded", lambda: qos(c, starved) == "p2-spot",
               timeout=40)
    waited = time.time() - t0
    print(f"\nupgraded {waited:.1f} s after submission (threshold 4 s, interval 1 s)")
    assert waited > 4
    # What the owner sees: squeue's QoS, and the mark in scontrol show job.
    assert MARK.search(admin_comment(c, starved)), admin_comment(c, starved)
    assert c.squeue_field(starved, "%T") == "PENDING"
    # slurmdbd's record has the new QoS.
    c.wait_for("sacct to show p2-spot", lambda: c.sacct_field(starved, "QOS") == "p2-spot",
               timeout=30)
    # Waiting for a reason of their own, the others are never upgraded,
    # though scans looked at them after they passed the threshold.
    starvation_scans_ran(c)
    for j, reason in ((held, "JobHeldUser"), (dependent, "Dependency")):
        assert qos(c, j) == "p3-spot", j
        assert c.squeue_field(j, "%r") == reason
        assert "[planc:free-attempt]" not in admin_comment(c, j)
    log = log_since(c, at)
    assert re.search(rf"slurmctld/planc: JobId={starved} upgraded from P3 to P2 \(free attempt\) "
                     r"after waiting \d+ s for (Resources|Priority)", log), log[-2000:]
    assert f"JobId={held} upgraded" not in log and f"JobId={dependent} upgraded" not in log
    # A node frees: the upgraded job starts, still marked (billing reads it).
    c.end_now(fillers[0])
    c.wait_for("the upgraded job to start", lambda: c.state(starved) == "RUNNING", timeout=60)
    assert qos(c, starved) == "p2-spot"
    assert MARK.search(admin_comment(c, starved))
    # The attempt ends (here: the owner cancels it after a few seconds of
    # running): its bill has the usage and costs nothing.
    c.wait_for("3 s of running", lambda: c.squeue_field(starved, "%M") not in
               ("0:00", "0:01", "0:02"), timeout=30)
    c.run("scancel", starved, check=True)
    (bill,) = wait_bills(c, starved, 1)
    print("bill of the free attempt:", bill)
    assert (bill["tier"], bill["qos"], bill["state"]) == ("P2", "p2-spot", "CANCELLED")
    assert int(bill["billable_seconds"]) >= 3 and float(bill["card_seconds"]) >= 24
    assert int(bill["amount_minor"]) == 0
    assert bill["zero_reason"] == "free attempt after starvation upgrade"


def test_user_cannot_move_or_resize_a_free_attempt(c):
    """The attempt was judged against the free attempts' share at its size:
    its owner can neither move it to another tier nor change its GPUs."""
    fill_with_p2(c)
    job = submit(c, "pcbob", "acct-spot", "p3")
    c.wait_for("the upgrade", lambda: qos(c, job) == "p2-spot", timeout=40)
    r = c.run("scontrol", "update", f"jobid={job}", "qos=p3", user="pcbob")
    assert r.returncode != 0
    assert qos(c, job) == "p2-spot"
    assert f"update of JobId={job} by uid" in log_since(c, 0)
    before = log_size(c)
    r = c.run("scontrol", "update", f"jobid={job}", "gres=gpu:4", user="pcbob")
    assert r.returncode != 0
    assert "its size cannot change while the attempt lasts" in log_since(c, before)
    assert c.squeue_field(job, "%b") == "gres:gpu:8", c.squeue_field(job, "%b")


def test_upgraded_job_preempted_goes_back_to_p3(c):
    at = log_size(c)
    job, _ = upgraded_and_running(c)
    node = c.squeue_field(job, "%N")
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", node, "--wrap",
                     "sleep 300", user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=90)
    # Requeued by the preemption; the attempt is over: back to P3, mark gone.
    c.wait_for("the job back in P3", lambda: qos(c, job) == "p3-spot", timeout=30)
    comment = admin_comment(c, job)
    assert "[planc:free-attempt]" not in comment
    assert f"planc: preempted at" in comment and f"by job {p0} (P0 p0-lease)" in comment
    assert c.state(job) == "PENDING"
    # The fresh clock: requeue restarted its waiting time (eligible again
    # only after the restart delay), so it is not upgraded at once.
    assert c.squeue_field(job, "%r") in ("BeginTime", "Resources", "Priority", "None")
    # slurmdbd kept the preempted P2 run with the mark: that segment is the
    # free one billing reads.
    def preempted_row():
        rows = c.run("sacct", "-n", "-P", "-D", "-X", "-j", job, "-o", "State,QOS,AdminComment",
                     user="pcbob").stdout.splitlines()
        return next((r for r in rows if r.startswith("PREEMPTED|")), None)
    row = c.wait_for("sacct's PREEMPTED row", preempted_row, timeout=30)
    assert row.split("|")[1] == "p2-spot"
    assert MARK.search(row) and "planc: preempted at" in row, row
    assert (f"slurmctld/planc: JobId={job}: free P2 attempt ended by requeue; back in P3"
            in log_since(c, at))


def test_scan_settings_in_scontrol_show_config(c):
    out = c.run("scontrol", "show", "config", check=True).stdout
    section = out[out.index("slurmctld/planc"):]
    for line in ("StarvationThreshold", "StarvationInterval", "StarvationMaxPerInterval",
                 "SpotCapP2", "SpotCapP3", "SpotCapResetTime", "SpotCapTimeZone",
                 "ScanLastUsec"):
        assert re.search(rf"^{line}\s+=", section, re.M), line
    assert re.search(r"^StarvationThreshold\s+= 4 s$", section, re.M)


def nice(c, jobid):
    text = c.run("scontrol", "show", "job", jobid, check=True).stdout
    return int(re.search(r"\bNice=(-?\d+)", text).group(1))


def fill_with(c, qos_name, n=4):
    ids = [submit(c, "pcbob", "acct-spot", qos_name) for _ in range(n)]
    c.wait_for(f"the {qos_name} jobs to fill the cluster",
               lambda: all(c.state(j) == "RUNNING" for j in ids), timeout=60)
    return ids


def test_a_free_attempt_preempts_nothing(c):
    """The cluster full of P3 jobs: a starved P3 job gets its free attempt
    as P2, but a P2 job that preempted the P3 jobs would make them starve
    in turn.  After the scheduler has looked at it (sdiag's cycles moved
    on), every P3 job still runs and the attempt waits for a free node."""
    fillers = fill_with(c, "p3")
    job = submit(c, "pcbob", "acct-spot", "p3")
    c.wait_for("the upgrade", lambda: qos(c, job) == "p2-spot", timeout=40)
    c.scheduler_looked(main=3, backfill=2)
    assert all(c.state(f) == "RUNNING" for f in fillers), [c.state(f) for f in fillers]
    assert c.state(job) == "PENDING"
    assert "preempted" not in admin_comment(c, fillers[0])
    c.end_now(fillers[0])
    c.wait_for("the attempt to start on the freed node", lambda: c.state(job) == "RUNNING",
               timeout=60)
    assert all(c.state(f) == "RUNNING" for f in fillers[1:])


def test_an_array_s_tasks_get_one_free_attempt_each_within_the_share(c):
    """An array's pending tasks share one record in slurmctld until they
    start.  Starving, they get their free attempts one task at a time,
    each split off into a job of its own, as separate jobs would: the
    share (two 8-GPU attempts) holds after the scan has looked again, the
    other tasks stay in P3 unmarked, and a task's attempt starts when a
    node frees."""
    fillers = fill_with(c, "p3")
    arr, p = c.sbatch("-A", "acct-spot", "--qos=p3", "--gres=gpu:8", "-N1", "--array=0-4",
                      c.stubborn, user="pcbob")
    assert arr, p.stderr

    def tasks():
        out = c.run("squeue", "-r", "-h", "-j", arr, "-o", "%i %q %T", check=True).stdout
        return [line.split() for line in out.splitlines() if line.strip()]

    c.wait_for("two tasks upgraded", lambda: sum(q == "p2-spot" for _, q, _ in tasks()) >= 2,
               timeout=40)
    starvation_scans_ran(c, 3)
    now = tasks()
    assert len(now) == 5, now
    upgraded = [t for t, q, _ in now if q == "p2-spot"]
    assert len(upgraded) == 2 and sum(q == "p3-spot" for _, q, _ in now) == 3, now
    for t in upgraded:
        assert MARK.search(admin_comment(c, t)), admin_comment(c, t)
    rest = next(t for t, q, _ in now if q == "p3-spot")
    assert "[planc:free-attempt]" not in admin_comment(c, rest)
    c.end_now(fillers[0])
    c.wait_for("an attempt to start", lambda: any(
        q == "p2-spot" and s == "RUNNING" for _, q, s in tasks()), timeout=60)


def test_a_free_attempt_queues_below_paying_p2_jobs_and_the_share_holds(c):
    """The cluster full of P2 jobs: a starved P3 job's attempt gets the
    Nice that takes P2's QoS priority off again, so a paying P2 job
    submitted after it starts first; a second starved job waits while the
    attempts' share (50%: two 8-GPU jobs, one running counted) would pass;
    when the attempt is requeued its Nice goes back to what it was."""
    at = log_size(c)
    fillers = fill_with(c, "p2")
    first = submit(c, "pcbob", "acct-spot", "p3")
    c.wait_for("the upgrade", lambda: qos(c, first) == "p2-spot", timeout=40)
    added = nice(c, first)
    assert added > 0, admin_comment(c, first)
    assert f"(Nice +{added})" in admin_comment(c, first)
    assert re.search(rf"JobId={first} upgraded from P3 to P2 \(free attempt\) .*; Nice "
                     rf"\+{added}", log_since(c, at))
    # Its owner cannot take the Nice off: not by setting it, not by setting
    # a priority (Slurm would clear the Nice); a higher Nice is theirs.
    for change, says in ((f"nice={added - 1}", f"its Nice may be raised, not set below {added}"),
                         ("priority=1", "a priority set by hand would clear that Nice")):
        before = log_size(c)
        r = c.run("scontrol", "update", f"jobid={first}", change, user="pcbob")
        assert r.returncode != 0, change
        assert says in log_since(c, before), log_since(c, before)
        assert nice(c, first) == added
    c.run("scontrol", "update", f"jobid={first}", f"nice={added + 5}", user="pcbob", check=True)
    assert nice(c, first) == added + 5
    c.run("scontrol", "update", f"jobid={first}", f"nice={added}", user="pcbob", check=True)
    paying = submit(c, "pcbob", "acct-spot", "p2")
    c.wait_for("both pending with a priority", lambda: all(
        c.squeue_field(j, "%T %r").split()[0] == "PENDING" and int(c.squeue_field(j, "%Q")) > 0
        for j in (first, paying)), timeout=30)
    # Older, but below the paying job.
    assert int(c.squeue_field(first, "%Q")) < int(c.squeue_field(paying, "%Q"))
    # A node frees: the paying job takes it.
    c.end_now(fillers[0])
    c.wait_for("the paying P2 job to start", lambda: c.state(paying) == "RUNNING", timeout=60)
    assert c.state(first) == "PENDING"
    # Two more starved P3 jobs: with the first attempt's 8 GPUs, one more
    # fits the 16-GPU share, the other waits in P3.
    second = submit(c, "pcbob", "acct-spot", "p3")
    third = submit(c, "pcbob", "acct-spot", "p3")
    c.wait_for("the second upgrade", lambda: qos(c, second) == "p2-spot", timeout=40)
    starvation_scans_ran(c, 3)
    assert qos(c, third) == "p3-spot"
    assert "[planc:free-attempt]" not in admin_comment(c, third)
    # The first attempt runs, then a P0 job preempts it: requeued, back in
    # P3, its Nice as before.
    c.end_now(fillers[1])
    c.wait_for("the first attempt to start", lambda: c.state(first) == "RUNNING", timeout=60)
    node = c.squeue_field(first, "%N")
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", node, "--wrap",
                     "sleep 300", user="pcalice")
    assert p0, p.stderr
    c.wait_for("the attempt back in P3", lambda: qos(c, first) == "p3-spot", timeout=90)
    assert nice(c, first) == 0
    assert "[planc:free-attempt]" not in admin_comment(c, first)

