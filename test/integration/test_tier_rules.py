"""Tier rules are planc.conf's: changing one changes what users see.

Here P3's Alternative (the guaranteed tier a preempted P3 job's owner is
advised to use).  acct-lease is given both guaranteed tiers for the test,
so the advice is the configured first choice: P1 by the policy's default,
P0 once planc.conf says Alternative=P0.
"""
import pytest

from test_preempt import c, running  # noqa: F401  (c: the emptied cluster)

P3_LINE = ("Tier=P3 QOS=p3-spot Aliases=p3,plan-b-spot,batch Priority=1000 Preemptible=yes "
           "Preempts=none GraceTime=0 PriceFactor=0.40")


@pytest.fixture
def lease_with_p1(c):
    add = c.run("sacctmgr", "-i", "modify", "account", "acct-lease", "set",
                "QOS+=p1-guaranteed")
    assert add.returncode == 0, add.stderr
    yield c
    c.run("sacctmgr", "-i", "modify", "account", "acct-lease", "set", "QOS-=p1-guaranteed")
    c.reload_planc_conf([])


def advice_for_a_p3_victim(c):
    victim, p = c.sbatch("-A", "acct-lease", "--qos=p3", "--gres=gpu:8", "-w", "gpu1", "--wrap",
                         "sleep 600", user="pcalice")
    assert victim, p.stderr
    c.wait_for("the P3 job to run", lambda: running(c, victim), timeout=60)
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0", "--gres=gpu:8", "-w", "gpu1", "--wrap",
                     "sleep 600", user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: running(c, p0), timeout=60)
    text = c.run("scontrol", "show", "job", victim, user="pcalice").stdout
    c.cancel_all()
    return text


def test_p3_alternative_from_planc_conf_changes_the_advice(lease_with_p1):
    c = lease_with_p1
    c.reload_planc_conf([])  # the example: P3's Alternative is the policy's P1
    assert "To avoid preemption retry in a guaranteed tier: --qos=p1-guaranteed" in \
        advice_for_a_p3_victim(c)
    c.reload_planc_conf([P3_LINE + " Alternative=P0"])
    assert "To avoid preemption retry in a guaranteed tier: --qos=p0-lease" in \
        advice_for_a_p3_victim(c)
