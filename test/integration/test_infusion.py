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
# Replicas run as pcpool (the platform's user: a pool may not run as root
# or SlurmUser), their output in /tmp/planc-pool-<pool>-<job>.out.
def output(pool):
    return f"/tmp/planc-pool-{pool}-%j.out"


OUT = output("other")
POOLS = [
    f"Pool=api Tier=P1 Account=acct-api User=pcpool Script={SERVE} GpusPerReplica=4 "
    f"MinReplicas=0 MaxReplicas=4 DrainGrace=5s Output={output('api')}",
    f"Pool=spotapi Tier=P3 Account=acct-api User=pcpool Script={SERVE} GpusPerReplica=4 "
    f"MinReplicas=0 MaxReplicas=2 DrainGrace=3s Output={output('spotapi')}",
]
SETTINGS = ["Infusion=yes", "InfusionWindow=6s", f"InfusionCooldown={COOLDOWN}s",
            "InfusionMaxPerHour=4", "Market=yes", "MarketInterval=1h"]


def replica_outputs():
    return set(glob.glob("/tmp/planc-pool-*.out"))


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
    # The replicas, as squeue shows them: the pool's user, account and tier
    # (the last grown a moment ago: once Slurm has started it).
    reps = c.wait_for("four replicas running", lambda: (lambda r: r if len(r) == 4 and all(
        v[4] == "RUNNING" for v in r.values()) else None)(replicas(c)), timeout=60)
    assert sorted(reps.values()) == sorted(
        [("planc-pool-spotapi", "pcpool", "acct-api", "p3-spot", "RUNNING")] * 2 +
        [("planc-pool-api", "pcpool", "acct-api", "p1-guaranteed", "RUNNING")] * 2), reps
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
                 r"drain grace of 3 s\): idle [0-9.]+% below 15\.0% - 12\.5%: shrink the P3 pool",
                 text)
    assert m, text
    drained = m.group(1)
    c.wait_for("the drained replica to end", lambda: c.state(drained) == "GONE", timeout=30)
    out = open(f"/tmp/planc-pool-spotapi-{drained}.out").read()
    assert f"replica {drained}: SIGTERM at " in out and ", draining" in out, out
    c.run("scancel", *p0, check=True)


def test_a_p0_job_takes_infused_replicas_back_within_40_s(infusion):
    """gpu2 runs an ordinary P1 job, gpu3 and gpu4 P3 jobs; infusion grows
    the P1 pool into gpu1's 8 idle GPUs (two 4-GPU replicas, kept by
    MinReplicas).  A P0 job for gpu1 preempts both replicas with the pool's
    drain grace (5 s), or infusion gives them back with that grace when its
    pass sees the P0 job first: each sees SIGTERM, drains, ends; the P0 job
    starts within the policy's 40 s of its submission, by slurmctld's own
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
    pool = (f"Pool=api Tier=P1 Account=acct-api User=pcpool Script={SERVE} GpusPerReplica=4 "
            f"MinReplicas=2 MaxReplicas=2 DrainGrace=5s Output={output('api')}")
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
        # Drained by preempt/planc for the P0 job or, when infusion's pass
        # came first (it gives replicas back while guaranteed work waits),
        # by infusion: either way SIGTERM and the pool's drain grace.
        assert (re.search(rf"preempt/planc: JobId={r} \(P1\) preempted by JobId={p0} \(P0\), "
                          r"grace 5 s, cancel", log) or
                re.search(rf"infusion: gave back pool api to \d+ replica\(s\) \(JobId={r} SIGTERM, "
                          r"killed after its drain grace of 5 s\)", log)), log
        c.wait_for(f"replica {r} to end", lambda: c.state(r) == "GONE", timeout=30)
        out = open(f"/tmp/planc-pool-api-{r}.out").read()
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


def test_a_replica_takes_only_gpus_nobody_queues_for(infusion):
    """Infusion grows into idle GPUs, never into work.  Four 8-GPU P3 jobs
    fill a cluster that was idle over the whole window (30 s) and a fifth
    queues; the window still remembers the idle time, so the P1 pool
    grows.  Its replica preempts nothing (a P1 job could take a P3 job's
    GPUs at once) and pends at the lowest priority: when a P3 job ends,
    its GPUs go to the queued P3 job, not to the replica; when another
    ends and nobody else queues, the replica starts there."""
    c = infusion
    c.cancel_all()
    c.reload_planc_conf([])
    window = 30
    # The idle meter is fed whether infusion is on or not: a whole window
    # of samples of the empty cluster.
    ctld_sampled(c, window // 5 + 1)
    spot = []
    for _ in range(5):
        j, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--gres=gpu:8", "--wrap", "sleep 600",
                        user="pcbob")
        assert j, p.stderr
        spot.append(j)
    running, queued = spot[:4], spot[4]
    c.wait_for("four P3 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in running),
               timeout=60)
    assert c.state(queued) == "PENDING"
    offset = c.log_offset()
    pool = (f"Pool=api Tier=P1 Account=acct-api User=pcpool Script={SERVE} GpusPerReplica=8 "
            f"MinReplicas=0 MaxReplicas=1 DrainGrace=3s Output={output('api')}")
    c.reload_planc_conf(["Infusion=yes", f"InfusionWindow={window}s",
                         f"InfusionCooldown={COOLDOWN}s", pool])
    m = c.wait_for("the P1 pool to grow on the window's idle time", lambda: re.search(
        r"infusion: grew pool api to 1 replica\(s\) \(JobId=(\d+)\)", c.log_since(offset)),
        timeout=60)
    replica = m.group(1)
    c.scheduler_looked(main=3, backfill=2)
    assert c.state(replica) == "PENDING"
    assert c.squeue_field(replica, "%Q") == "1"  # the lowest priority
    assert all(c.state(j) == "RUNNING" for j in running)
    # Its owner cannot lift it: a hold and a release keep priority 1 (Slurm
    # computes it again, the Nice takes it all off), a lower Nice or a
    # priority by hand are refused with the reason in slurmctld's log.
    c.run("scontrol", "hold", replica, user="pcpool", check=True)
    c.run("scontrol", "release", replica, user="pcpool", check=True)
    assert c.squeue_field(replica, "%Q") == "1"
    for change, says in (("nice=0", "it keeps the lowest priority"),
                         ("priority=1000000", "it keeps the lowest priority"),
                         ("qos=p3-spot", "its tier is its pool's")):
        at = c.log_offset()
        r = c.run("scontrol", "update", f"jobid={replica}", change, user="pcpool")
        assert r.returncode != 0, change
        assert f"JobId={replica} by uid" in c.log_since(at) and \
            f"this job is a capacity-infusion replica: {says}" in c.log_since(at), c.log_since(at)
    assert c.squeue_field(replica, "%Q") == "1"
    assert not re.search(rf"preempted by JobId={replica}\b", c.log_since(offset)), \
        c.log_since(offset)
    # A P3 job ends: the queued one gets its GPUs, the replica still waits.
    c.run("scancel", running[0], check=True)
    c.wait_for("the queued P3 job to run", lambda: c.state(queued) == "RUNNING", timeout=60)
    assert c.state(replica) == "PENDING"
    # Another ends and nobody else queues: the replica starts there.
    c.run("scancel", running[1], check=True)
    c.wait_for("the replica to run", lambda: c.state(replica) == "RUNNING", timeout=60)
    assert all(c.state(j) == "RUNNING" for j in running[2:] + [queued])
    c.reload_planc_conf([])
    c.cancel_all()


def ctld_sampled(c, n=3):
    """Waits until slurmctld/planc has sampled the jobs n more times (its
    controller decides at each sample): "nothing happened" is then a
    decision, not a look not taken yet."""
    start = int(ctld_config(c)["SampleCount"])
    c.wait_for(f"{n} samples", lambda: int(ctld_config(c)["SampleCount"]) >= start + n,
               timeout=60)


def test_a_pool_slurmctld_may_not_trust_is_refused(infusion):
    """A pool that runs as root is refused when planc.conf is read (the
    configuration before stays in force); one whose Script another user
    owns is refused by slurmctld/planc, which grows nothing for it and says
    why; planc-conf check fails on both."""
    import pwd
    c = infusion
    c.cancel_all()
    c.reload_planc_conf([])
    offset = c.log_offset()
    path = c.write_planc_conf(SETTINGS[:-2] + [
        f"Pool=bad Tier=P1 Account=acct-api User=root Script={SERVE} GpusPerReplica=4"])
    c.wait_for("the refusal", lambda: "key 'User': a pool's replicas may not run as root: give "
               "the platform's own user, e.g. User=maas (useradd --system maas); the "
               "configuration loaded before stays in force" in c.log_since(offset), timeout=30)
    r = c.run(os.path.join(ROOT, "planc-conf"), "check", path)
    assert r.returncode == 1 and "key 'User': a pool's replicas may not run as root" in r.stderr, \
        r.stderr
    # A script pcbob owns, in a directory only root may write.
    d = os.path.join(c.dir, "pools")
    os.makedirs(d, mode=0o755, exist_ok=True)
    script = os.path.join(d, "theirs.sh")
    with open(script, "w") as f:
        f.write(open(SERVE).read())
    os.chmod(script, 0o755)
    uid = pwd.getpwnam("pcbob").pw_uid
    os.chown(script, uid, uid)
    offset = c.log_offset()
    c.reload_planc_conf(SETTINGS + [
        f"Pool=theirs Tier=P3 Account=acct-api User=pcpool Script={script} GpusPerReplica=4 "
        f"MaxReplicas=2 Output={OUT}"])
    why = (f"infusion: pool 'theirs': Script={script} is owned by uid {uid}, not root: slurmctld "
           f"runs it for the pool: chown root {script} and chmod go-w it (and its directory); the "
           "pool is not used (its replicas are drained)")
    c.wait_for("the pool refused", lambda: why in c.log_since(offset), timeout=30)
    ctld_sampled(c)
    assert not replicas(c) and "grew pool" not in c.log_since(offset)
    r = c.run(os.path.join(ROOT, "planc-conf"), "check", os.path.join(c.dir, "etc", "planc.conf"))
    assert r.returncode == 1 and f"Script={script} is owned by uid {uid}, not root" in r.stderr, \
        r.stderr
    c.reload_planc_conf([])


def test_guaranteed_work_replicas_cannot_help_takes_nothing_back(infusion):
    """Two infused P1 replicas run.  A P0 job larger than the 80% cap (32
    GPUs of a cap of 25) and one pinned to a drained node wait forever,
    whatever infusion gives back: no replica is drained for them (several
    samples later both still run).  Then the pool is removed from
    planc.conf: its replicas are drained."""
    c = infusion
    c.cancel_all()
    pool = (f"Pool=api Tier=P1 Account=acct-api User=pcpool Script={SERVE} GpusPerReplica=4 "
            f"MinReplicas=2 MaxReplicas=2 DrainGrace=3s Output={OUT}")
    c.reload_planc_conf(SETTINGS[:-2] + [pool])
    c.wait_for("two replicas running", lambda: (lambda r: r if len(r) == 2 and all(
        v[4] == "RUNNING" for v in r.values()) else None)(replicas(c)), timeout=90)
    running = set(replicas(c))
    c.run("scontrol", "update", "nodename=gpu4", "state=drain", "reason=planc-test", check=True)
    try:
        offset = c.log_offset()
        big, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "-N4", "--gres=gpu:8", "--wrap",
                          "sleep 60", user="pcalice")
        assert big, p.stderr
        pinned, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "-w", "gpu4", "--gres=gpu:1",
                             "--wrap", "sleep 60", user="pcalice")
        assert pinned, p.stderr
        c.scheduler_looked(main=2, backfill=1)
        ctld_sampled(c, 3)
        assert c.state(big) == "PENDING" and c.state(pinned) == "PENDING"
        assert set(replicas(c)) == running
        assert "gave back" not in c.log_since(offset), c.log_since(offset)
    finally:
        c.run("scontrol", "update", "nodename=gpu4", "state=resume", check=True)
    for j in (big, pinned):
        c.run("scancel", j)
    # The pool removed (infusion stays on with another): its replicas go.
    offset = c.log_offset()
    c.reload_planc_conf(SETTINGS[:-2] + [POOLS[1].replace("MaxReplicas=2", "MaxReplicas=1")])
    for r in running:
        c.wait_for(f"replica {r} drained", lambda: re.search(
            rf"infusion: JobId={r}: a replica of pool api, which planc\.conf no longer has",
            c.log_since(offset)), timeout=30)
        c.wait_for(f"replica {r} to end", lambda: c.state(r) == "GONE", timeout=30)
    c.reload_planc_conf([])
    c.cancel_all()


@pytest.mark.parametrize("case,cooldown", [("p1", 2), ("p3", 300)])
def test_p0_keeps_its_40_s_while_replicas_hold_the_cap(infusion, case, cooldown):
    """test/lib/infusion_trials.py: replicas (DrainGrace 30 s, deaf to
    SIGTERM) hold the 80% cap, an ordinary P1 job or a P3 job on the last
    node; an 8-GPU P0 job starts within 40 s of its submission by
    slurmctld's timestamps, exactly one replica is drained for it, no pool
    grows while it waits, and the other jobs are untouched.  (Ten trials of
    each: test/bench/infusion-p0-trials.)"""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
    from infusion_trials import p0_trial
    r = p0_trial(infusion, case, cooldown)
    print(f"{case}, cooldown {cooldown} s: the P0 job started {r['latency']:.0f} s after its "
          "submission")
    assert r["latency"] <= 40, r["log"]
    assert len(r["drained"]) == 1, r["log"]
    assert not r["grown"], r["log"]
    assert r["untouched"], (r["preempted"], r["log"])
