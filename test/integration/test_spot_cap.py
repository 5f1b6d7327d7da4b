"""The daily spot cap on the private cluster, as users see it.

planc.conf here: P3 may use 0.01 card-hours (36 card-seconds) per account
per day, P2 is unlimited; a "day" lasts 100 s (SpotCapDayLength, the
short day for tests) and starts just after slurmctld has restarted with
this configuration, so earlier tests' use does not count and "tomorrow"
comes within the test.  The module restores the example planc.conf.
"""
import os
import re
import time

import pytest

DAY = 100
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


def sbatch(c, qos, *extra, user="pcbob", account="acct-spot"):
    return c.sbatch("-A", account, f"--qos={qos}", "--gres=gpu:8", *extra, "--wrap",
                    "sleep 600", user=user)


def refused_p3(c, user="pcbob", account="acct-spot"):
    """Submits a held P3 job; returns sbatch's error text when refused."""
    jobid, p = sbatch(c, "p3", "--hold", user=user, account=account)
    if jobid:
        c.run("scancel", jobid)
        return None
    return p.stderr


# What each account is told to do instead: a guaranteed tier it may use
# (acct-lease has P0 but not P1, acct-api P1), or that it has none.
ADVICE = {
    "acct-spot": "account acct-spot may use no guaranteed tier; ask your account coordinator "
                 "for access to p0-lease (P0) or p1-guaranteed (P1)",
    "acct-lease": "To run now, use a guaranteed tier: --qos=p0-lease (P0, Plan A long-term lease)",
    "acct-api": "To run now, use a guaranteed tier: --qos=p1-guaranteed (P1, ",
}


def check_message(c, err, account="acct-spot"):
    reset = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.reset_at))
    assert re.search(
        rf"sbatch: error: daily spot cap reached: account {account} has used \d+\.\d+ of its "
        r"0\.01 card-hours of P3 \(p3-spot\) today, counting running jobs\. "
        rf"The cap resets at {reset} UTC\+00:00 \(in [^)]*\)\. " + re.escape(ADVICE[account]),
        err), err


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
    # Accounts with a guaranteed tier are told to use it.
    for user, account in (("pcalice", "acct-lease"), ("pccarol", "acct-api")):
        other, p = sbatch(c, "p3", user=user, account=account)
        assert other, p.stderr
        err = c.wait_for(f"{account}'s P3 submission to be refused",
                         lambda: refused_p3(c, user, account), timeout=60)
        check_message(c, err, account)
        c.run("scancel", other)
    # Each refusal since the restart is counted for Prometheus (one per
    # account above; the counters restart with slurmctld).
    from test_exporter import fresh_metrics
    c.state_dir = os.path.join(c.dir, "state", "ctld")
    m = fresh_metrics(c, "slurmctld")
    assert m[("planc_spot_cap_refusals_total", '{tier="P3"}')] == 3.0
    assert m[("planc_spot_cap_refusals_total", '{tier="P2"}')] == 0.0
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
