"""The k=1 scenario: P0 arrivals into a cluster full of checkpointing P2
work, with capacity infusion on (replicas grown while the cluster is idle
at the start)."""
import random
import sys
sys.path.insert(0, ".")  # run from the top of the tree
from tools.replay import workload as W

rng = random.Random(1)
jobs = []
n = 0


def add(submit, duration, gpus, tier, ckpt=False):
    global n
    n += 1
    jobs.append(W.Job(f"k{n:04d}", float(submit), float(duration), float(gpus),
                      max(1, int(gpus * 3)), 0, tier, ckpt))


# 0-8 min: a little P3 work; most of the pool idle, so infusion grows pools.
for i in range(6):
    add(30 * i, 3600, 1, "P3")
# 8-12 min: P2 fills the pool: 34 jobs x 4 GPUs (136 > 128), 2 h each, checkpointing.
for i in range(34):
    add(480 + 7 * i, 7200, 4, "P2", ckpt=True)
# 15-55 min: 24 P0 leases, one every 100 s, 1-8 GPUs, 2 h each.
for i in range(24):
    add(900 + 100 * i, 7200, rng.choice([1, 1, 2, 2, 4, 8]), "P0")
# P3 work keeps arriving (it waits; P2 does not preempt P2).
for i in range(20):
    add(600 + 150 * i, 1800, 1, "P3")
jobs.sort(key=lambda j: j.submit)
W.write_csv(jobs, sys.argv[1] if len(sys.argv) > 1 else "k1-scenario.csv")
print(len(jobs), "jobs")
