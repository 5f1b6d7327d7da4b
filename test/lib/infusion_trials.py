"""P0 keeps its 40 s while capacity infusion's P1 replicas hold the 80% cap:
one trial on a private 4-node cluster (32 GPUs, the cap 25), shared by
test_infusion.py (one trial of each case in CI) and
test/bench/infusion-p0-trials (ten of each, with the policy's 5 min
cooldown and a 2 s one).

The cases ("what runs on the last nodes"):
  p1  an ordinary P1 job on gpu4 and a P3 job on gpu3; two 8-GPU infused
      P1 replicas on gpu1-2 (24 guaranteed GPUs: the cap is held);
  p3  a P3 job on gpu4; three 8-GPU infused P1 replicas on gpu1-3.
The replicas ignore SIGTERM and have DrainGrace=30s.  An 8-GPU P0 job
arrives: the cap holds it back (24 + 8 > 25), so infusion gives one replica
back (SIGTERM, SIGKILL 30 s later); the P0 job must start within 40 s of
its submission by slurmctld's own timestamps, exactly one replica drained,
no pool grown while it waits (MaxReplicas leaves room), and the ordinary
P1 job and the P3 job untouched (still running, never preempted).
"""
import os
import re
from datetime import datetime

# A replica that ignores SIGTERM: the drain grace must run out and SIGKILL
# end it (the longest a reclaim can take).
STUBBORN = """#!/bin/bash
trap '' TERM
echo "replica ${SLURM_JOB_ID:-?} serving, deaf to SIGTERM"
while :; do sleep 1; done
"""


def stubborn_script(c):
    """The script, root's, in a directory only root may write (a pool's
    Script must be: read_trusted_script)."""
    d = os.path.join(c.dir, "pools")
    os.makedirs(d, mode=0o755, exist_ok=True)
    os.chmod(d, 0o755)
    path = os.path.join(d, "stubborn.sh")
    with open(path, "w") as f:
        f.write(STUBBORN)
    os.chmod(path, 0o755)
    return path


def pool_line(c, min_replicas, max_replicas):
    return (f"Pool=api Tier=P1 Account=acct-api User=pcpool Script={stubborn_script(c)} "
            f"GpusPerReplica=8 MinReplicas={min_replicas} MaxReplicas={max_replicas} "
            "DrainGrace=30s Output=/dev/null")


def replicas(c):
    out = c.run("squeue", "-h", "-o", "%i|%j|%T|%N", check=True).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return {r[0]: (r[2], r[3]) for r in rows if r[1] == "planc-pool-api"}


def p0_trial(c, case, cooldown):
    """One trial.  Returns a dict: latency (s, by slurmctld's SubmitTime and
    StartTime), drained (replicas given back), grown (pool growth while the
    P0 job waited), untouched (the P1 and P3 jobs still running, never
    preempted), and the log excerpt."""
    assert case in ("p1", "p3")
    c.cancel_all()
    c.reload_planc_conf([])
    others = []
    if case == "p1":
        others.append(c.sbatch("-A", "acct-api", "--qos=p1-guaranteed", "-w", "gpu4",
                               "--gres=gpu:8", "--wrap", "sleep 900", user="pccarol")[0])
        others.append(c.sbatch("-A", "acct-spot", "--qos=p3-spot", "-w", "gpu3", "--gres=gpu:8",
                               "--wrap", "sleep 900", user="pcbob")[0])
        n = 2
    else:
        others.append(c.sbatch("-A", "acct-spot", "--qos=p3-spot", "-w", "gpu4", "--gres=gpu:8",
                               "--wrap", "sleep 900", user="pcbob")[0])
        n = 3
    assert all(others), others
    c.wait_for("the other jobs to run", lambda: all(c.state(j) == "RUNNING" for j in others),
               timeout=60)
    # The replicas, grown fast (a short cooldown, no hourly limit).
    c.reload_planc_conf(["Infusion=yes", "InfusionWindow=2s", "InfusionCooldown=1s",
                         "InfusionMaxPerHour=1000", pool_line(c, n, n)])
    c.wait_for(f"{n} replicas running", lambda: (lambda r: r if len(r) == n and all(
        v[0] == "RUNNING" for v in r.values()) else None)(replicas(c)), timeout=120)
    # The trial's settings: the cooldown under test, room to grow.
    limit = "4" if cooldown >= 300 else "1000"
    c.reload_planc_conf(["Infusion=yes", "InfusionWindow=2s", f"InfusionCooldown={cooldown}s",
                         f"InfusionMaxPerHour={limit}", pool_line(c, n, n + 1)])
    offset = c.log_offset()
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:8", "--wrap", "sleep 900",
                     user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=120)
    job = c.show_job(p0)
    latency = (datetime.fromisoformat(job["StartTime"]) -
               datetime.fromisoformat(job["SubmitTime"])).total_seconds()
    log = c.log_since(offset)
    drained = re.findall(r"slurmctld/planc: infusion: gave back pool api to \d+ replica\(s\) "
                         r"\(JobId=(\d+) SIGTERM", log)
    # Grown while it waited: after slurmctld logged its submission (a pool
    # may grow between the settings' reload and the submission).
    submitted = log.find(f"_slurm_rpc_submit_batch_job: JobId={p0} ")
    grown = re.findall(r"slurmctld/planc: infusion: grew pool api", log[max(submitted, 0):])
    preempted = [j for j in others if re.search(rf"JobId={j} \(P\d\) preempted by", log)]
    untouched = all(c.state(j) == "RUNNING" for j in others) and not preempted
    result = {"case": case, "cooldown": cooldown, "latency": latency, "drained": drained,
              "grown": grown, "untouched": untouched, "preempted": preempted, "p0": p0,
              "log": log}
    c.cancel_all()
    c.reload_planc_conf([])
    return result
