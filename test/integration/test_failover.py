"""A backup slurmctld takes over in the middle of a preemption.

A cluster of its own (2 nodes) with a backup controller
(PLANC_BACKUP_CTLD=1: two SlurmctldHost lines, one StateSaveLocation).
The account has used its daily P3 spot cap and a P2 job has preempted its
P3 job (the P3 preemption budget counts it); a P2 job on gpu1 is preempted
by a P0 job and, 5 s into its 30 s grace, the primary slurmctld is killed
with SIGKILL.  What users must still see once the backup is in control:
the P0 job running within 40 s of its submission plus the takeover, the
victim's whole grace and then its requeue with a free (zero) bill, its
preemption count carried on (the next preemption is its 2nd), the hour's P3
preemption still counted, the spot cap still reached, and every run
billed exactly once.
"""
import datetime
import os
import re
import signal
import time

import pytest

from conftest import start_cluster, stop_cluster, worker_overrides
from test_billing import psql
from test_exporter import fresh_metrics
from test_preempt import STUBBORN, events, first, running, submit_to_start
from test_spot_cap import refused_p3

GRACE = 30


@pytest.fixture(scope="module")
def c():
    o = worker_overrides({"PLANC_NODES": "2", "PLANC_BACKUP_CTLD": "1"}, offset=50)
    o["PLANC_CLUSTER_DIR"] += "-failover"
    cl = start_cluster(o)
    cl.set_planc_conf(["SpotCapP3=0.01"])
    cl.stubborn = cl.write_script("stubborn.sh", STUBBORN.format(work=cl.work))
    cl.state_dir = os.path.join(cl.dir, "state", "ctld")
    yield cl
    stop_cluster(cl)


def log_text(c, name):
    return open(os.path.join(c.dir, "log", name), errors="replace").read()


def logged_at(text, needle):
    """slurmctld's own timestamp of the first line containing `needle`."""
    m = re.search(r"^\[(\S+?)\] .*" + re.escape(needle), text, re.M)
    return datetime.datetime.fromisoformat(m.group(1)).timestamp() if m else None


def used_p3(err):
    return float(re.search(r"has used (\d+\.\d+) of its 0\.01 card-hours of P3", err).group(1))


def settled_p3(c):
    """acct-spot's P3 card-seconds as the spot state file has them."""
    text = open(os.path.join(c.state_dir, "planc_spot_state")).read()
    m = re.search(r"^used 3 (\d+) acct-spot$", text, re.M)
    return int(m.group(1)) if m else 0


def note(c, jobid):
    return c.run("scontrol", "show", "job", jobid, user="pcbob").stdout


def test_backup_takes_over_during_a_grace_and_keeps_the_policy(c):
    ping = c.run("scontrol", "ping").stdout
    assert re.search(r"Slurmctld\(primary\) at plancctl1 is UP", ping), ping
    assert re.search(r"Slurmctld\(backup\) at plancctl2 is UP", ping), ping
    backup_log = log_text(c, "slurmctld-backup.log")
    assert "preempt/planc: a backup controller: on standby" in backup_log

    # The account's P3 spot cap, reached on gpu2.
    p3, p = c.sbatch("-A", "acct-spot", "--qos=p3", "--gres=gpu:8", "-w", "gpu2", "--wrap",
                     "sleep 600", user="pcbob")
    assert p3, p.stderr
    c.wait_for("the P3 job to run", lambda: running(c, p3), timeout=60)
    used_before = used_p3(c.wait_for("a P3 submission to be refused", lambda: refused_p3(c),
                                     timeout=30))
    # Its use up to slurmctld/planc's last sample is settled in the spot
    # state file past the cap: a run requeued between samples keeps only
    # that much (its end time is gone), and the P3 job is preempted next.
    c.wait_for("the P3 use settled past the cap", lambda: settled_p3(c) >= 36, timeout=30)
    # A P2 job takes gpu2 from the P3 job: a P3 preemption in the hour,
    # which the P3 preemption budget counts.
    p2b, p = c.sbatch("-A", "acct-spot", "--qos=p2", "--gres=gpu:8", "-w", "gpu2", "--wrap",
                      "sleep 600", user="pcbob")
    assert p2b, p.stderr
    c.wait_for("the P2 job to take gpu2", lambda: running(c, p2b), timeout=60)
    budget_before = fresh_metrics(c, "preempt")[("planc_p3_preempt_budget_used", "")]
    assert budget_before >= 1

    # A P2 victim on gpu1 and its P0 preemptor.
    victim, p = c.sbatch("-A", "acct-spot", "--qos=p2", "--gres=gpu:8", "-w", "gpu1", c.stubborn,
                         user="pcbob")
    assert victim, p.stderr
    c.wait_for("the P2 job to run", lambda: running(c, victim), timeout=60)
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", "gpu1", "--wrap",
                     "sleep 600", user="pcalice")
    assert p0, p.stderr
    sigterm = c.wait_for("the victim's SIGTERM", lambda: first(c, victim, "SIGTERM"), timeout=30)

    # 5 s into the grace the primary dies.
    time.sleep(max(0.0, sigterm + 5 - time.time()))
    primary = int(open(os.path.join(c.dir, "run", "ctld", "slurmctld.pid")).read().split()[0])
    os.kill(primary, signal.SIGKILL)
    killed = time.time()

    c.wait_for("the backup to take control",
               lambda: "preempt/planc: in control" in log_text(c, "slurmctld-backup.log"),
               timeout=60)
    backup_log = log_text(c, "slurmctld-backup.log")
    takeover = logged_at(backup_log, "Running as primary controller") - killed
    assert "preempt/planc: in control: reading the preemption state" in backup_log
    assert re.search(r"preempt/planc: 2 job\(s\) with preemptions counted, 1 in their grace",
                     backup_log), backup_log[-3000:]

    c.wait_for("the P0 job to run", lambda: running(c, p0), timeout=90)
    took = submit_to_start(c, p0)
    print(f"\nprimary SIGKILLed 5 s into the grace: backup in control {takeover:.1f} s later; "
          f"P0 running {took:.0f} s after its submission (by slurmctld)")
    assert took <= 40 + takeover, c.show_job(p0)

    # The victim had its whole grace, then was requeued; that run is free.
    c.wait_for("the victim to be requeued", lambda: c.state(victim) == "PENDING", timeout=30)
    assert "requeued (auto-restart); preemption 1 of at most 3 per 24 h" in note(c, victim)
    rows = c.wait_for("the victim's bill", lambda: psql(
        c, "SELECT extract(epoch FROM end_time), state, amount_minor FROM planc.bill "
           "WHERE job_id = :'p0' ORDER BY start_time", victim) or None, timeout=60)
    ended, state, amount = float(rows[0][0]), rows[0][1], int(rows[0][2])
    assert ended - sigterm >= GRACE - 1, (ended, sigterm)
    assert (state, amount) == ("PREEMPTED", 0), rows

    # The P3 preemptions of the hour were carried over.
    assert fresh_metrics(c, "preempt")[("planc_p3_preempt_budget_used", "")] == budget_before

    # The spot cap is still reached: the P3 use was carried over.
    err = refused_p3(c)
    assert err, ("a P3 submission was accepted after the takeover:\n" + "\n".join(
        l for l in log_text(c, "slurmctld-backup.log").splitlines() if "planc" in l)[-4000:])
    assert used_p3(err) >= used_before, err

    # The victim's preemption count was carried over: its next one is its 2nd.
    c.end_now(p0)
    c.wait_for("the victim's second run",
               lambda: [k for k, _ in events(c, victim)].count("start") == 2, timeout=90)
    p0b, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", "gpu1", "--wrap",
                      "sleep 600", user="pcalice")
    assert p0b, p.stderr
    c.wait_for("the second preemption's note",
               lambda: "preemption 2 of at most 3 per 24 h" in note(c, victim), timeout=60)

    # Every run billed exactly once: one bill per run slurmdbd lists.
    c.cancel_all()
    jobs = (p3, p2b, victim, p0, p0b)
    for j in jobs:
        runs = len(c.run("sacct", "-n", "-X", "-D", "-P", "-j", j, "-o", "JobID").stdout.split())
        c.wait_for(f"job {j}'s {runs} bill(s)", lambda: len(psql(
            c, "SELECT 1 FROM planc.bill WHERE job_id = :'p0'", j)) >= runs, timeout=90)
        rows = psql(c, "SELECT count(*), count(DISTINCT segment) FROM planc.bill "
                       "WHERE job_id = :'p0'", j)
        assert rows == [[str(runs), str(runs)]], (j, runs, rows)
