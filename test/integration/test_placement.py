"""PackGuaranteed: part-node jobs go first to nodes that already hold
guaranteed work, so the other nodes stay clearable for guaranteed jobs that
need whole nodes.  What an admin sees: the weights in `scontrol show node`;
what a user sees: the node squeue shows the job on.
"""
import datetime
import os
import re
import signal

import pytest

from test_preempt import c, running, submit  # noqa: F401  (c: the emptied cluster)


def weight(c, node):
    out = c.run("scontrol", "show", "node", node, check=True).stdout
    return int(re.search(r"\bWeight=(\d+)", out).group(1))


def weights(c):
    return {n: weight(c, n) for n in ("gpu1", "gpu2", "gpu3", "gpu4")}


def samples(c):
    out = c.run("scontrol", "show", "config", check=True).stdout
    return int(re.search(r"^SampleCount\s+= (\d+)$", out, re.M).group(1))


def reconfigured(c, how):
    """slurmctld reads slurm.conf again: `how` is "SIGHUP" (systemctl reload)
    or "scontrol" (scontrol reconfigure).  Returns once two 5 s samples have
    run since."""
    offset = c.log_offset()
    if how == "SIGHUP":
        pid = int(open(os.path.join(c.dir, "run", "slurmctld.pid")).read().split()[0])
        os.kill(pid, signal.SIGHUP)
        c.wait_for("slurmctld to take the SIGHUP",
                   lambda: "Reconfigure signal (SIGHUP) received" in c.log_since(offset))
    else:
        c.run("scontrol", "reconfigure", check=True)
    n = samples(c)
    c.wait_for("two samples after the reconfigure", lambda: samples(c) >= n + 2, timeout=30)
    return c.log_since(offset)


def node_of(c, jobid):
    c.wait_for(f"job {jobid} to run", lambda: running(c, jobid), timeout=60)
    return c.squeue_field(jobid, "%N")


@pytest.fixture
def packing(c):
    c.reload_planc_conf(["PackGuaranteed=yes"])
    yield c
    c.cancel_all()
    c.reload_planc_conf([])
    c.wait_for("every weight back to slurm.conf's (1)",
               lambda: set(weights(c).values()) == {1}, timeout=30)


def layout(c):
    """A 1-GPU P1 job on gpu3 and a 6-GPU P3 job on gpu1 (24 of its 32
    CPUs): Slurm's own choice for the next 1-GPU job is gpu1, the node with
    room that it fills first."""
    p1 = submit(c, "pccarol", "acct-api", "p1", 1, "-w", "gpu3", "-c", "1")
    p3 = submit(c, "pcbob", "acct-spot", "p3", 6, "-w", "gpu1", "-c", "24")
    for j in (p1, p3):
        c.wait_for(f"job {j} to run", lambda: running(c, j), timeout=60)
    return p1, p3


def test_without_packing_a_small_guaranteed_job_goes_where_slurm_puts_it(c):
    layout(c)
    assert set(weights(c).values()) == {1}
    small = submit(c, "pccarol", "acct-api", "p1", 1, "-c", "1")
    assert node_of(c, small) == "gpu1", "the control of the test below: Slurm's own placement"


def test_packing_puts_part_node_jobs_beside_guaranteed_work(packing):
    c = packing
    offset = c.log_offset()
    p1, p3 = layout(c)
    c.wait_for("gpu3 weighted before the others",
               lambda: weights(c) == {"gpu1": 3, "gpu2": 3, "gpu3": 2, "gpu4": 3}, timeout=30)
    # The guaranteed job's node is steered as it starts (the job-begin
    # hook), not at the next 5 s sample: by slurmctld's own clocks.
    m = re.search(r"^\[(\S+)\] _update_node_weight: nodes gpu3 weight set to: 2$",
                  c.log_since(offset), re.M)
    assert m, c.log_since(offset)
    steered_at = datetime.datetime.fromisoformat(m.group(1))
    started = datetime.datetime.fromisoformat(c.show_job(p1)["StartTime"])
    assert abs((steered_at - started).total_seconds()) < 1.5, (steered_at, started)
    small = submit(c, "pccarol", "acct-api", "p1", 1, "-c", "1")
    assert node_of(c, small) == "gpu3"
    spot = submit(c, "pcbob", "acct-spot", "p3", 1, "-c", "1")
    assert node_of(c, spot) == "gpu3", "spot work of part of a node goes there too"
    # A guaranteed job that needs a whole node still gets one.
    whole = submit(c, "pccarol", "acct-api", "p1", 8)
    assert node_of(c, whole) in ("gpu2", "gpu4")
    # When the guaranteed jobs on gpu3 end, its weight goes back to that of
    # a node without guaranteed work within a sample.
    c.run("scancel", p1, small, check=True)
    c.wait_for("gpu3 no longer weighted first", lambda: weight(c, "gpu3") == 3, timeout=30)
    assert weight(c, node_of(c, whole)) == 2
    # Slurm copies the weight it schedules by into the node record when it
    # reads slurm.conf again (and keeps it on a SIGHUP): the steered weights
    # stay as they are, not steered again from the copy (4 and 7).
    steered = weights(c)
    for how in ("SIGHUP", "scontrol"):
        log = reconfigured(c, how)
        assert weights(c) == steered, (how, log[-3000:])
    out = c.run("scontrol", "show", "config", check=True).stdout
    assert re.search(r"^PackGuaranteed\s+= yes$", out, re.M), out
    assert int(re.search(r"^PackWeightChanges\s+= (\d+)$", out, re.M).group(1)) >= 3, out
