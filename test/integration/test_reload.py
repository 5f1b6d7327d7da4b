"""planc.conf changed while slurmctld runs, as an admin does it: edit the
file, `scontrol reconfigure`, no restart.  A new alias is accepted at
submit, the next bill carries the new price; a broken file leaves the
configuration in force and the log names the line."""
import os

import pytest

from test_billing import psql

P3_WITH_ALIAS = ("Tier=P3 QOS=p3-spot Aliases=p3,plan-b-spot,batch,bargain Priority=1000 "
                 "Preemptible=yes Preempts=none GraceTime=0 PriceFactor=0.40")
PLUGINS = ("job_submit/planc", "preempt/planc", "jobcomp/planc", "slurmctld/planc")


@pytest.fixture
def c(cluster):
    cluster.cancel_all()
    yield cluster
    cluster.write_planc_conf([])
    cluster.run("scontrol", "reconfigure")
    cluster.cancel_all()


class Log:
    """slurmctld's log from now on."""

    def __init__(self, c):
        self.c, self.offset = c, c.log_offset()

    def new(self):
        return self.c.log_since(self.offset)


def submit_bargain(c):
    return c.sbatch("-A", "acct-spot", "--qos=bargain", "--gres=gpu:1", "--wrap", "sleep 1",
                    user="pcbob")


def test_reload_without_restart(c):
    pid = open(os.path.join(c.dir, "run", "slurmctld.pid")).read().strip()
    jobid, p = submit_bargain(c)
    assert not jobid and "unknown tier 'bargain'" in p.stderr, p.stderr

    log = Log(c)
    conf = c.write_planc_conf([P3_WITH_ALIAS, "DefaultCardHourPrice=30.00",
                               "CardHourPrice=h800:30.00"])
    assert c.run("scontrol", "reconfigure").returncode == 0
    c.wait_for("every plugin to reload planc.conf",
               lambda: all(f"{pl}: reloaded {conf}" in log.new() for pl in PLUGINS), timeout=30)
    jobid, p = submit_bargain(c)
    assert jobid, p.stderr
    assert c.squeue_field(jobid, "%q") == "p3-spot"
    (price,) = c.wait_for("the job's bill", lambda: psql(
        c, "SELECT card_hour_price FROM planc.bill WHERE job_id = :'p0'", jobid), timeout=90)
    assert float(price[0]) == 30.0, price

    # A broken file: the old one stays in force, the log names the line.
    log = Log(c)
    text = open(conf).read().splitlines()
    bad = next(i for i, l in enumerate(text, 1) if l.startswith("GuaranteedCapPercent="))
    text[bad - 1] = "GuaranteedCapPercent=eighty"
    c.write_planc_conf(None, raw="\n".join(text) + "\n")
    c.run("scontrol", "reconfigure")
    expected = (f"{conf}:{bad}: key 'GuaranteedCapPercent': 'eighty' is not a whole number "
                "(expected 1 to 100); the configuration loaded before stays in force")
    c.wait_for("every plugin to refuse the broken file",
               lambda: all(f"error: {pl}: {expected}" in log.new() for pl in PLUGINS),
               timeout=30)
    jobid, p = submit_bargain(c)
    assert jobid, p.stderr  # the alias of the configuration in force
    # slurmctld never restarted.
    assert open(os.path.join(c.dir, "run", "slurmctld.pid")).read().strip() == pid
