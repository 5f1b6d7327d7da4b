"""The daily spot cap on the private cluster, as users see it.

planc.conf here: P3 may use 0.01 card-hours (36 card-seconds) per account
per day, P2 is unlimited; a "day" lasts 3 minutes (SpotCapDayLength, the
short day for tests) and starts just after slurmctld has restarted with
this configuration, so earlier tests' use does not count and "tomorrow"
comes within the test.  The module restores the example planc.conf.
"""
import os
import re
import time

import pytest

DAY = 180
FIRST_RESET_AHEAD = 20  # seconds: after slurmctld's restart


@pytest.fixture(scope="module")
def capped(cluster):
    day_start = int(time.time()) + FIRST_RESET_AHEAD
    hhmmss = time.strftime("%H:%M:%S", time.gmtime(day_start))
    cluster.set_planc_conf(["SpotCapP3=0.01", "SpotCapP2=unlimited", "SpotCapTimeZone=UTC",
                            f"SpotCapResetTime={hhmmss}", f"SpotCapDayLength={DAY}"])
    cluster.cancel_all()
    assert time.time() < day_start, "slurmctld took too long to restart"
    time.sleep(day_start - time.time() + 1)
    cluster.reset_at = day_start + DAY  # the next reset
    yield cluster
    cluster.cancel_all()
    cluster.set_planc_conf([])


def sbatch(c, qos, *extra):
    return c.sbatch("-A", "acct-spot", f"--qos={qos}", "--gres=gpu:8", *extra, "--wrap",
                    "sleep 600", user="pcbob")


def refused_p3(c):
    """Submits a held P3 job; returns sbatch's error text when refused."""
    jobid, p = sbatch(c, "p3", "--hold")
    if jobid:
        c.run("scancel", jobid)
        return None
    return p.stderr


def check_message(c, err):
    reset = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.reset_at))
    assert re.search(
        r"sbatch: error: daily spot cap reached: account acct-spot has used \d+\.\d+ of its 0\.01 "
        r"card-hours of P3 \(p3-spot\) today, counting running jobs\. "
        rf"The cap resets at {reset} UTC\+00:00 \(in [^)]*\)\. "
        r"To run now, use a guaranteed tier: --qos=p1-guaranteed \(P1, ", err), err


def test_submission_past_the_cap_is_refused_also_after_a_restart(capped):
    c = capped
    # One 8-GPU P3 job: 36 card-seconds are used within 5 s of its start.
    first, p = sbatch(c, "p3")
    assert first, p.stderr
    c.wait_for("the first P3 job to run", lambda: c.state(first) == "RUNNING", timeout=60)
    # Use is sampled every 5 s: within that, the next P3 submission fails.
    err = c.wait_for("a P3 submission to be refused", lambda: refused_p3(c), timeout=30)
    print("\n" + err.strip())
    check_message(c, err)
    assert "Job violates accounting/QOS policy" in err
    # P2 has no cap; the running job is not touched.
    p2, p = sbatch(c, "p2", "--hold")
    assert p2, p.stderr
    assert c.state(first) == "RUNNING"
    # The counters survive a restart of slurmctld.
    c.ctl("restart-ctld")
    err = refused_p3(c)
    assert err, "a P3 submission was accepted right after the restart"
    check_message(c, err)
    log = open(os.path.join(c.dir, "log", "slurmctld.log"), errors="replace").read()
    assert "slurmctld/planc: spot use restored from" in log
    assert time.time() < c.reset_at, "the test ran into the reset; it proves nothing"


def test_next_day_is_accepted(capped):
    c = capped
    # The running job would use up the new day's 36 card-seconds within 5 s.
    c.cancel_all()
    assert refused_p3(c), "expected the cap to be reached before the reset"
    wait = c.reset_at - time.time()
    if wait > 0:
        time.sleep(wait + 1)
    jobid, p = sbatch(c, "p3", "--hold")
    assert jobid, p.stderr
