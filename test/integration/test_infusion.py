"""Capacity infusion on the private cluster (issue 16): slurmctld/planc's
controller measures idle GPUs over InfusionWindow and grows the serving
pools of planc.conf by submitting replica jobs (etc/pools/serve.sh) as the
pool's user, in the pool's tier, with the infused mark; above
InfusionIdleMarket it asks the P2 market for a round at once; every
operation is logged and counted, never closer than InfusionCooldown, and
InfusionMaxPerHour stops the next; a pool shrinks by draining a replica
(SIGTERM, then SIGKILL after the pool's DrainGrace)."""
import glob
import os
import re
from datetime import datetime

import pytest

from conftest import ROOT

SERVE = os.path.join(ROOT, "etc", "pools", "serve.sh")
COOLDOWN = 8
POOLS = [
    f"Pool=api Tier=P1 Account=acct-api User=root Script={SERVE} GpusPerReplica=4 MinReplicas=0 "
    "MaxReplicas=4 DrainGrace=5s",
    f"Pool=spotapi Tier=P3 Account=acct-api User=root Script={SERVE} GpusPerReplica=4 "
    "MinReplicas=0 MaxReplicas=2 DrainGrace=3s",
]
SETTINGS = ["Infusion=yes", "InfusionWindow=6s", f"InfusionCooldown={COOLDOWN}s",
            "InfusionMaxPerHour=4", "Market=yes", "MarketInterval=1h"]


def replica_outputs():
    return set(glob.glob("/root/planc-pool-*.out"))


@pytest.fixture(scope="module")
def infusion(cluster):
    cluster.cancel_all()
    before = replica_outputs()
    yield cluster
    cluster.reload_planc_conf([])
    cluster.cancel_all()
    for f in replica_outputs() - before:
        os.remove(f)


def ctld_config(c):
    out = c.run("scontrol", "show", "config", check=True).stdout
    section = out[out.index("----- slurmctld/planc"):]
    return dict(re.findall(r"^(\w+)\s+= (.*)$", section, re.M))


def operations(log):
    """(time, text) of each infusion operation in slurmctld's log."""
    return [(datetime.fromisoformat(m.group(1)), m.group(2)) for m in re.finditer(
        r"^\[([0-9T:.-]+)\] slurmctld/planc: infusion: ((?:grew|shrank|gave back) pool .*)$", log,
        re.M)]


def replicas(c):
    """Replica jobs as squeue shows them: id -> (name, user, account, qos, state)."""
    out = c.run("squeue", "-h", "-o", "%i|%j|%u|%a|%q|%T", check=True).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return {r[0]: tuple(r[1:]) for r in rows if r[1].startswith("planc-pool-")}


def test_idle_grows_the_pools_within_the_cooldown_and_the_hourly_limit(infusion):
    """On the idle 32-GPU cluster: above 30% idle a market round at once;
    above 15% the P3 pool grows (to its 2 replicas), then the P1 pool;
    four operations, each at least the cooldown after the one before; the
    fifth is held by the hourly limit, said once in the log."""
    c = infusion
    offset = c.log_offset()
    c.reload_planc_conf(SETTINGS + POOLS)
    c.wait_for("four scale operations", lambda: len(operations(c.log_since(offset))) >= 4,
               timeout=120)
    log = c.wait_for("the fifth held by the hourly limit", lambda: (lambda l: l if re.search(
        r"infusion: idle [0-9.]+% above 5\.0%: grow the P1 pool, held \d+ s by the hourly limit "
        r"\(4 an hour\)", l) else None)(c.log_since(offset)), timeout=60)
    ops = operations(log)
    assert len(ops) == 4, ops
    assert [re.match(r"grew pool (\w+) to (\d) replica", t).groups() for _, t in ops] == [
        ("spotapi", "1"), ("spotapi", "2"), ("api", "1"), ("api", "2")], ops
    assert "above 15.0%: grow the P3 pool (spotapi)" in ops[0][1], ops[0]
    assert "above 5.0%: grow the P1 pool (api)" in ops[2][1], ops[2]
    for (a, _), (b, _) in zip(ops, ops[1:]):
        assert (b - a).total_seconds() >= COOLDOWN, ops
    assert "operation(s) in the last hour of at most 4" in ops[3][1]
    # The market round, asked at once (its interval is an hour).
    assert re.search(r"infusion: idle \d+ of 32 GPUs, above InfusionIdleMarket 0\.30: a P2 market "
                     r"round now", log), log
    cfg = c.wait_for("a market round", lambda: (lambda m: m if m.get("MarketLastRound", "none yet")
                                                != "none yet" else None)(ctld_config(c)))
    # The replicas, as squeue shows them: the pool's user, account and tier.
    reps = replicas(c)
    assert sorted(reps.values()) == sorted(
        [("planc-pool-spotapi", "root", "acct-api", "p3-spot", "RUNNING")] * 2 +
        [("planc-pool-api", "root", "acct-api", "p1-guaranteed", "RUNNING")] * 2), reps
    for jobid, (name, *_rest) in reps.items():
        comment = c.show_job(jobid).get("AdminComment", "")
        pool = name[len("planc-pool-"):]
        tier, grace = ("P1", 5) if pool == "api" else ("P3", 3)
        assert c.run("scontrol", "show", "job", jobid, check=True).stdout.count(
            f"AdminComment=[planc:infused] pool {pool}: a replica capacity infusion added ({tier}, "
            f"drain grace {grace} s)") == 1, comment
    cfg = ctld_config(c)
    assert cfg["Infusion"] == "yes"
    assert cfg["InfusionReplicas"] == "api=2,spotapi=2", cfg
    assert cfg["InfusionOperationsLastHour"] == "4 of at most 4", cfg
    assert cfg["InfusionLastOperation"].endswith(
        ops[3][1].split(": ", 1)[1].rsplit(";", 1)[0]) or "grew pool api to 2" in cfg[
        "InfusionLastOperation"], cfg
    assert cfg["InfusionNextAllowed"] != "now", cfg

    # Guaranteed work fills the idle GPUs: the P3 pool shrinks (the hourly
    # limit raised), its newest replica drained: SIGTERM, the stand-in
    # server drains and exits.
    p0 = []
    for _ in range(4):  # 16 GPUs in 4-GPU jobs: they fit wherever the replicas left room
        j, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:4", "--wrap", "sleep 600",
                        user="pcalice")
        assert j, p.stderr
        p0.append(j)
    c.wait_for("the P0 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in p0), timeout=60)
    c.wait_for("no GPU idle over the window", lambda: ctld_config(c)["InfusionIdle"].startswith(
        "0 of 32 GPUs"), timeout=30)
    offset = c.log_offset()
    c.reload_planc_conf(SETTINGS[:-3] + ["InfusionMaxPerHour=10"] + SETTINGS[-2:] + POOLS)
    log = c.wait_for("a P3 replica drained", lambda: (lambda l: l if operations(l) else None)(
        c.log_since(offset)), timeout=60)
    (_, text), = operations(log)
    m = re.match(r"shrank pool spotapi to 1 replica\(s\) \(JobId=(\d+) SIGTERM, killed after its "
                 r"drain grace of 3 s\): idle [0-9.]+% below 15\.0% - 2\.0%: shrink the P3 pool",
                 text)
    assert m, text
    drained = m.group(1)
    c.wait_for("the drained replica to end", lambda: c.state(drained) == "GONE", timeout=30)
    out = open(f"/root/planc-pool-spotapi-{drained}.out").read()
    assert f"replica {drained}: SIGTERM at " in out and ", draining" in out, out
    c.run("scancel", *p0, check=True)


def test_a_p0_job_takes_infused_replicas_back_within_40_s(infusion):
    """gpu2 runs an ordinary P1 job, gpu3 and gpu4 P3 jobs; infusion grows
    the P1 pool into gpu1's 8 idle GPUs (two 4-GPU replicas, kept by
    MinReplicas).  A P0 job for gpu1 preempts both replicas with the pool's
    drain grace (5 s): each sees SIGTERM, drains, ends; the P0 job starts
    within the policy's 40 s of its submission, by slurmctld's own
    timestamps.  A P0 job for gpu2 finds only the ordinary P1 job there:
    it is never preempted, and the P0 job waits."""
    c = infusion
    c.cancel_all()
    c.reload_planc_conf([])
    p1, p = c.sbatch("-A", "acct-api", "--qos=p1-guaranteed", "-w", "gpu2", "--gres=gpu:8",
                     "--wrap", "sleep 600", user="pccarol")
    assert p1, p.stderr
    spot = []
    for node in ("gpu3", "gpu4"):
        j, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "-w", node, "--gres=gpu:8", "--wrap",
                        "sleep 600", user="pcbob")
        assert j, p.stderr
        spot.append(j)
    c.wait_for("the P1 and P3 jobs to run",
               lambda: all(c.state(j) == "RUNNING" for j in [p1] + spot), timeout=60)
    offset = c.log_offset()
    pool = (f"Pool=api Tier=P1 Account=acct-api User=root Script={SERVE} GpusPerReplica=4 "
            "MinReplicas=2 MaxReplicas=2 DrainGrace=5s")
    c.reload_planc_conf(SETTINGS[:-2] + [pool])
    c.wait_for("two replicas running", lambda: (lambda r: r if len(r) == 2 and all(
        v[4] == "RUNNING" for v in r.values()) else None)(replicas(c)), timeout=90)
    reps = replicas(c)
    assert all(c.squeue_field(j, "%N") == "gpu1" for j in reps), reps
    assert len(operations(c.log_since(offset))) == 2

    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "-w", "gpu1", "--gres=gpu:8", "--wrap",
                     "sleep 600", user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=60)
    job = c.show_job(p0)
    waited = (datetime.fromisoformat(job["StartTime"]) -
              datetime.fromisoformat(job["SubmitTime"])).total_seconds()
    print(f"P0 job {p0}: submitted {job['SubmitTime']}, started {job['StartTime']}: {waited:.0f} s")
    assert waited <= 40, job
    log = c.log_since(offset)
    for r in reps:
        assert re.search(rf"preempt/planc: JobId={r} \(P1\) preempted by JobId={p0} \(P0\), grace "
                         r"5 s, cancel", log), log
        c.wait_for(f"replica {r} to end", lambda: c.state(r) == "GONE", timeout=30)
        out = open(f"/root/planc-pool-api-{r}.out").read()
        assert f"replica {r}: SIGTERM at " in out and ", draining" in out, out
    # The ordinary P1 job is never a victim: a P0 job for its node waits
    # while the scheduler looks, and it keeps running.
    p0b, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "-w", "gpu2", "--gres=gpu:8",
                      "--wrap", "sleep 600", user="pcalice")
    assert p0b, p.stderr
    c.scheduler_looked(main=3, backfill=2)
    assert c.state(p0b) == "PENDING" and c.state(p1) == "RUNNING"
    assert not re.search(rf"JobId={p1} \(P1\) preempted", c.log_since(offset))
    c.cancel_all()
