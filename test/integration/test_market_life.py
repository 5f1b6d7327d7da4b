"""A P2 job's market life (common/market_life.h) against what its owner can
do with scontrol: every way into P2 goes through a round while the market
is open, a win covers one run of the request it won with, a lock is
re-checked when its --begin moves, one bid cannot block a round, and what
the market held is released when it closes.  Each test does what the job's
owner (or an operator, or an admin) would do, and asserts what squeue,
scontrol show job (the mark), slurmctld's log and planc.bill say."""
import re

import pytest

from test_market import admin_comment, life_field, market_config, next_round


@pytest.fixture(scope="module")
def market(cluster):
    cluster.cancel_all()
    cluster.reload_planc_conf(["Market=yes", "MarketInterval=3s"])
    yield cluster
    cluster.cancel_all()
    cluster.reload_planc_conf([])


def bills(c, jobid, n):
    """(segment, card_hour_price, note) of the job's first n bills."""
    from test_billing import psql
    return c.wait_for(f"{n} bill(s) of {jobid}", lambda: (lambda r: r if len(r) >= n else None)(
        psql(c, "SELECT segment, card_hour_price, note FROM planc.bill WHERE job_id = :'p0' "
             "ORDER BY segment", jobid)), timeout=60)


def floor_now(c):
    """The untyped market's floor now, as scontrol show config says it."""
    return market_config(c)["MarketFloor"].split(",")[0].split("=")[1]


def running_for_a_second(c, j):
    c.wait_for(f"{j} to run", lambda: c.state(j) == "RUNNING", timeout=60)
    c.wait_for(f"{j} to have run", lambda: c.squeue_field(j, "%M") not in ("0:00",), timeout=30)


def test_a_p3_job_moved_into_p2_waits_for_a_round_and_pays_its_price(market):
    """Submitted held in P3, moved into P2 by its owner, released: it bids
    (held by the market, not by its owner) and runs only once a round
    matched it; its bill charges its cards at that round's price, at or
    above the floor; not the fixed P2 price (20.00 x 0.35)."""
    c = market
    c.cancel_all()
    j, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--gres=gpu:1", "--hold", "--wrap",
                    "sleep 300", user="pcbob")
    assert j, p.stderr
    offset = c.log_offset()
    c.run("scontrol", "update", f"jobid={j}", "QOS=p2-spot", user="pcbob", check=True)
    comment = admin_comment(c, j)
    assert c.squeue_field(j, "%q %T") == "p2-spot PENDING"
    assert f"job_submit/planc: market: JobId={j} moved into P2: it bids the list price in the " \
        "next round" in c.log_since(offset)
    # Its owner's hold (--hold) is kept: out of the rounds (a round may
    # have said so already).
    assert (life_field(comment, "state"), life_field(comment, "hold")) == ("waiting", "owner"), \
        comment
    assert life_field(comment, "reason") in ("moved-in", "owner-held"), comment
    assert life_field(comment, "bid") == "list", comment
    # Its owner's release releases its own hold only: the market's stays.
    c.run("scontrol", "release", j, user="pcbob", check=True)
    assert c.state(j) == "PENDING" and life_field(admin_comment(c, j), "hold") is None
    running_for_a_second(c, j)
    comment = admin_comment(c, j)
    assert life_field(comment, "state") == "matched", comment
    price = life_field(comment, "price")
    assert float(price) >= float(floor_now(c)) >= 6.00, (comment, floor_now(c))
    c.run("scancel", j, check=True)
    ((segment, card_price, note),) = bills(c, j, 1)
    assert card_price == f"{float(price):.6f}", (card_price, price)
    assert f"P2 market: cards at the matched {price} CNY/card-hour" in note, note


def test_a_p2_job_submitted_before_the_first_sample_is_held(market):
    """Right after slurmctld starts the market has no floor yet: a P2 job
    submitted then waits for a round all the same (checked against the
    floor at no vacancy), never passes unpriced."""
    c = market
    c.cancel_all()
    c.ctl("restart-ctld")
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--wrap", "sleep 300",
                    user="pcbob")
    assert j, p.stderr
    assert "sbatch: P2 spot market: no bid: the round's price, at most the list price 20.00" in \
        p.stderr, p.stderr
    assert c.state(j) == "PENDING" and c.squeue_field(j, "%r") in ("JobHeldUser", "JobHeldAdmin")
    assert life_field(admin_comment(c, j), "reason") == "new"
    c.cancel_all()


def test_lock_price_needs_a_begin_an_interval_ahead_and_a_moved_begin_is_rechecked(market):
    """--lock-price --begin=now would skip the round the job waits for:
    refused with its message.  A booking whose --begin its owner moves 30
    days out would outlive its 24 h: the lock is dropped, the job held to
    bid, its mark says why; moved within the 24 h, it is kept."""
    c = market
    c.cancel_all()
    jobid, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--lock-price",
                        "--begin=now", "--wrap", "sleep 1", user="pcbob")
    assert not jobid
    assert ("sbatch: error: --lock-price: --begin must be at least one market interval (3 s) "
            "ahead: a booking locks the price for a later start; to run now, bid in the next "
            "round (leave --lock-price out)\n") in p.stderr, p.stderr
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--lock-price",
                    "--begin=now+1hour", "--wrap", "sleep 1", user="pcbob")
    assert j, p.stderr
    # The market records what the lock is for at its first look.
    c.wait_for("the booking's request recorded", lambda: life_field(
        admin_comment(c, j), "gpus") == "1", timeout=30)
    assert c.squeue_field(j, "%r") == "BeginTime"  # a booking is not held
    c.run("scontrol", "update", f"jobid={j}", "StartTime=now+2hours", user="pcbob", check=True)
    comment = admin_comment(c, j)
    assert life_field(comment, "state") == "locked", comment
    c.run("scontrol", "update", f"jobid={j}", "StartTime=now+30days", user="pcbob", check=True)
    comment = admin_comment(c, j)
    assert (life_field(comment, "state"), life_field(comment, "reason")) == (
        "waiting", "lock-dropped"), comment
    assert c.state(j) == "PENDING" and c.squeue_field(j, "%r") in ("JobHeldUser", "JobHeldAdmin")
    assert re.search(rf"job_submit/planc: market: JobId={j}: its --begin moved to \S+Z, out of what "
                     r"its price was locked for \(from \S+Z to \S+Z\): the lock is dropped and it "
                     r"bids", c.log_since(0)), comment
    c.cancel_all()


@pytest.mark.parametrize("how", ["owner's requeue", "requeuehold and release", "admin's requeue"])
def test_a_win_covers_one_run(market, how):
    """A winner runs; then its owner requeues it, or requeues it held and
    releases it, or an admin requeues it: the requeue holds it at once (it
    may not start again at its old price) and it bids again; its next run
    pays what the round it wins then says (the floor raised meanwhile, so
    the two runs' prices differ), each run billed at its own."""
    c = market
    c.cancel_all()
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s"])
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--bid=15", "--wrap",
                    "sleep 300", user="pcbob")
    assert j, p.stderr
    running_for_a_second(c, j)
    first = life_field(admin_comment(c, j), "price")
    # A higher floor from now on (the pool is idle: 15 x 0.6 = 9.00).
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s", "CardHourPriceFloor=15"])
    c.wait_for("the higher floor", lambda: floor_now(c) == "9.00", timeout=30)
    if how == "owner's requeue":
        c.run("scontrol", "requeue", j, user="pcbob", check=True)
    elif how == "admin's requeue":
        c.run("scontrol", "requeue", j, check=True)
    else:
        c.run("scontrol", "requeuehold", j, user="pcbob", check=True)
    comment = admin_comment(c, j)
    assert (life_field(comment, "state"), life_field(comment, "reason")) == (
        "waiting", "requeued"), comment
    # Pending again once its node has cleaned up, held all along.
    c.wait_for("the job pending", lambda: c.state(j) == "PENDING", timeout=30)
    assert c.squeue_field(j, "%r") in ("JobHeldUser", "JobHeldAdmin",
                                       "job requeued in held state"), c.squeue_field(j, "%r")
    if how == "requeuehold and release":
        # Slurm's requeuehold is its owner's hold: out of the rounds until
        # the owner releases it (the round that looks says so).
        c.wait_for("the owner's hold in the mark", lambda: life_field(
            admin_comment(c, j), "hold") == "owner", timeout=30)
        next_round(c, next_round(c, None)["MarketLastRound"])
        assert c.state(j) == "PENDING"
        c.run("scontrol", "release", j, user="pcbob", check=True)
        assert c.state(j) == "PENDING"  # the market's hold stays
    running_for_a_second(c, j)
    comment = admin_comment(c, j)
    assert life_field(comment, "state") == "matched" and life_field(comment, "run") == "1", comment
    second = life_field(comment, "price")
    assert float(second) >= 9.00 > float(first), (first, second)
    c.run("scancel", j, check=True)
    rows = bills(c, j, 2)
    assert [(r[0], r[1]) for r in rows[:2]] == [("0", f"{float(first):.6f}"),
                                                ("1", f"{float(second):.6f}")], rows
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s"])


def test_a_winner_that_does_not_start_within_an_interval_bids_again(market):
    """A bid pinned to a node a P1 job fills wins (the market counts GPUs,
    not nodes) but cannot start: one interval after its round it bids
    again, held, its mark says so; once the node is free it wins a later
    round and runs."""
    c = market
    c.cancel_all()
    p1, p = c.sbatch("-A", "acct-api", "--qos=p1-guaranteed", "-w", "gpu1", "--gres=gpu:8",
                     "--wrap", "sleep 300", user="pccarol")
    assert p1, p.stderr
    c.wait_for("the P1 job to run", lambda: c.state(p1) == "RUNNING", timeout=60)
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "-w", "gpu1", "--gres=gpu:1", "--bid=15",
                    "--wrap", "sleep 300", user="pcbob")
    assert j, p.stderr
    offset = c.log_offset()
    c.wait_for("a win", lambda: life_field(admin_comment(c, j), "state") == "matched", timeout=30)
    assert c.state(j) == "PENDING"
    # One interval later its win has expired: it bids again (and, the GPUs
    # being there, may win the same round again: it still cannot start).
    c.wait_for("the win to expire", lambda: f"slurmctld/planc: market: JobId={j} win expired: "
               "bid 15.00 CNY/card-hour; it won but did not start within 3 s: it bids again" in
               c.log_since(offset), timeout=30)
    assert c.state(j) == "PENDING"
    c.end_now(p1)
    c.wait_for("the bid to win again and run", lambda: c.state(j) == "RUNNING", timeout=60)
    assert life_field(admin_comment(c, j), "state") == "matched"
    c.cancel_all()


def test_one_bid_cannot_block_a_round(market):
    """A guaranteed job on one of 4 nodes; a P2 bid for all 4 nodes (no
    --bid: the list price) and two 1-GPU bids (15 and 12).  The big bid is
    too large while the guaranteed job runs: the two small bids win the
    next round and pay the floor, a price the big bid did not set.  The
    guaranteed job ends: the big bid has no room (the small ones run), and
    after MarketReserveAfter the room is held for it: a new small bid waits
    behind it, the small jobs end, and the big bid wins."""
    from test_billing import psql
    c = market
    c.cancel_all()
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s", "MarketReserveAfter=4s"])
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "-w", "gpu1", "--gres=gpu:8", "--wrap",
                     "sleep 300", user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=60)
    big, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "-N4", "--gres=gpu:8", "--wrap",
                      "sleep 300", user="pcbob")
    assert big, p.stderr
    small = {}
    for price in (15, 12):
        j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", f"--bid={price}",
                        "--wrap", "sleep 25", user="pcbob")
        assert j, p.stderr
        small[price] = j
    c.wait_for("both small bids to run", lambda: all(c.state(j) == "RUNNING"
                                                    for j in small.values()), timeout=30)
    floor = floor_now(c)
    for j in small.values():
        assert life_field(admin_comment(c, j), "price") == floor, admin_comment(c, j)
    assert life_field(admin_comment(c, big), "reason") == "too-large", admin_comment(c, big)
    at = life_field(admin_comment(c, small[15]), "round")
    rows = c.wait_for("the round's record", lambda: psql(
        c, "SELECT job_id, outcome, pays_micros FROM planc.market_bid "
        "WHERE round_at = :'p0'::timestamptz ORDER BY job_id", at), timeout=30)
    assert sorted(rows) == sorted([[big, "too large", "0"],
                                   [small[15], "won", str(int(float(floor) * 1e6))],
                                   [small[12], "won", str(int(float(floor) * 1e6))]]), rows
    # Room appears: the big bid first has none (30 of 32 offered), then
    # holds what is left; a new small bid waits behind it.
    c.end_now(p0)
    c.wait_for("the room held for the big bid", lambda: (
        f"the room held for JobId={big}") in c.log_since(0), timeout=60)
    late, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--bid=19", "--wrap",
                       "sleep 300", user="pcbob")
    assert late, p.stderr
    c.wait_for("the late bid held for the larger one", lambda: life_field(
        admin_comment(c, late), "reason") == "held-for-larger", timeout=30)
    c.wait_for("the big bid to win and run", lambda: c.state(big) == "RUNNING", timeout=90)
    assert c.squeue_field(big, "%D") == "4"
    assert c.state(late) == "PENDING"
    c.cancel_all()


def test_a_change_of_gpus_sends_a_winner_back_to_bid(market):
    """A bid pinned to a drained node wins (the market counts the node's
    GPUs) but cannot start; its owner asks for 2 GPUs instead of 1: the win
    was for 1, so it is held in the same update and bids again
    (reason=changed).  The node back, it wins a later round and its run is
    billed at that round's price, for 2 cards."""
    c = market
    c.cancel_all()
    c.reload_planc_conf(["Market=yes", "MarketInterval=20s"])
    c.run("scontrol", "update", "nodename=gpu1", "state=drain", "reason=planc-test", check=True)
    try:
        j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "-w", "gpu1", "--gres=gpu:1",
                        "--bid=15", "--wrap", "sleep 300", user="pcbob")
        assert j, p.stderr
        c.wait_for("a win", lambda: life_field(admin_comment(c, j), "state") == "matched",
                   timeout=60)
        assert c.state(j) == "PENDING"
        first = admin_comment(c, j)
        c.run("scontrol", "update", f"jobid={j}", "TresPerNode=gres:gpu:2", user="pcbob",
              check=True)
        comment = admin_comment(c, j)
        assert (life_field(comment, "state"), life_field(comment, "reason")) == (
            "waiting", "changed"), comment
        assert c.squeue_field(j, "%r") in ("JobHeldUser", "JobHeldAdmin")
    finally:
        c.run("scontrol", "update", "nodename=gpu1", "state=resume", check=True)
    running_for_a_second(c, j)
    second = admin_comment(c, j)
    assert (life_field(second, "state"), life_field(second, "gpus")) == ("matched", "2"), second
    assert life_field(second, "round") != life_field(first, "round"), (first, second)
    c.run("scancel", j, check=True)
    ((_, card_price, note),) = bills(c, j, 1)
    assert card_price == f"{float(life_field(second, 'price')):.6f}", (card_price, second)
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s"])


def test_job_arrays_cannot_bid(market):
    """An array bids as one job but would run as many: refused while the
    market is open, at submission and when moved into P2."""
    c = market
    c.cancel_all()
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--array=1-3", "--gres=gpu:1", "--wrap",
                    "sleep 1", user="pcbob")
    assert not j
    assert ("sbatch: error: job arrays and heterogeneous jobs cannot bid in the P2 market (each "
            "needs a round of its own): submit the tasks as separate jobs, or use another tier\n"
            ) in p.stderr, p.stderr
    a, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--array=1-3", "--hold", "--gres=gpu:1",
                    "--wrap", "sleep 1", user="pcbob")
    assert a, p.stderr
    r = c.run("scontrol", "update", f"jobid={a}", "QOS=p2-spot", user="pcbob")
    assert r.returncode != 0, r.stdout
    assert c.squeue_field(f"{a}_1", "%q") == "p3-spot"
    c.cancel_all()


def test_closing_the_market_releases_its_bids(market):
    """Bids held for a round (rounds 10 min apart); planc.conf Market=no: the
    market releases them with a note in their mark, and they run at the
    fixed P2 price.  Opened again, a job still waiting bids."""
    c = market
    c.cancel_all()
    c.reload_planc_conf(["Market=yes", "MarketInterval=10min"])
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--wrap", "sleep 300",
                    user="pcbob")
    assert j, p.stderr
    held, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--hold", "--wrap",
                       "sleep 300", user="pcbob")
    assert held, p.stderr
    c.reload_planc_conf([])
    c.wait_for("the bid to be released and run", lambda: c.state(j) == "RUNNING", timeout=30)
    comment = admin_comment(c, j)
    assert (life_field(comment, "state"), life_field(comment, "reason")) == (
        "released", "market-closed"), comment
    # Its owner's own hold is theirs to release, as on any job.
    c.wait_for("the held one released by the market", lambda: life_field(
        admin_comment(c, held), "state") == "released", timeout=30)
    assert c.state(held) == "PENDING"
    c.run("scontrol", "release", held, user="pcbob", check=True)
    c.wait_for("the held one to run", lambda: c.state(held) == "RUNNING", timeout=30)
    c.run("scancel", j, held, check=True)
    (row,) = bills(c, j, 1)
    assert row[1] == "20.000000" and "P2 market" not in row[2], row
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s"])


def test_a_bid_takes_part_once_its_dependency_is_met(market):
    """A bid that waits on another job (--dependency=afterok) is not in the
    rounds until that job has ended well (Slurm tests no held job's
    dependencies: the market tests its bids'); then it wins and runs."""
    c = market
    c.cancel_all()
    first, p = c.sbatch("-A", "acct-spot", "--qos=p3-spot", "--gres=gpu:1", "--wrap", "sleep 8",
                        user="pcbob")
    assert first, p.stderr
    c.wait_for("the first job to run", lambda: c.state(first) == "RUNNING", timeout=60)
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1",
                    f"--dependency=afterok:{first}", "--wrap", "sleep 300", user="pcbob")
    assert j, p.stderr
    c.wait_for("the bid out of the rounds", lambda: life_field(
        admin_comment(c, j), "reason") == "dependency", timeout=30)
    assert c.state(j) == "PENDING"
    c.wait_for("the bid to win once its dependency is met", lambda: c.state(j) == "RUNNING",
               timeout=60)
    assert life_field(admin_comment(c, j), "state") == "matched"
    c.cancel_all()


def test_the_fallback_rechecks_the_account(small_cluster):
    """--spot-fallback moves a preempted job as SlurmUser, which skips
    Slurm's own check of the QoS against the account: a job moved by its
    owner to an account without a guaranteed tier, then preempted, is not
    moved to P1; its mark says why, and it stays in P3."""
    c = small_cluster
    c.cancel_all()
    c.reload_planc_conf([])
    j, p = c.sbatch("-A", "acct-api", "--qos=p3-spot", "--gres=gpu:4", "--spot-fallback", "--hold",
                    "--wrap", "sleep 600", user="pccarol")
    assert j, p.stderr
    c.run("scontrol", "update", f"jobid={j}", "Account=acct-nodefault", user="pccarol", check=True)
    c.run("scontrol", "release", j, user="pccarol", check=True)
    c.wait_for("the P3 job to run", lambda: c.state(j) == "RUNNING", timeout=60)
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:6", "--wrap", "sleep 600",
                     user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=60)
    c.wait_for("the refusal in the mark", lambda: "not moved to P1 (p1-guaranteed): account "
               "acct-nodefault may not use p1-guaranteed; the job stays in P3" in
               admin_comment(c, j), timeout=30)
    assert c.squeue_field(j, "%q %T %a") == "p3-spot PENDING acct-nodefault"
    c.cancel_all()


def test_a_restart_between_a_preemption_and_its_requeue_keeps_the_fallback_and_the_rebid(
        small_cluster):
    """slurmctld restarts while a --spot-fallback P3 job and a matched P2 job
    sit in their preemption's grace (P3's GraceTime raised to 20 s here):
    after the restart the P3 job still comes back in P1 (the move was saved
    with the preemption state) and the P2 job still bids again, held (its
    market life is in its mark)."""
    c = small_cluster
    c.cancel_all()
    conf = ["Market=yes", "MarketInterval=3s",
            "Tier=P3 QOS=p3-spot Aliases=p3,plan-b-spot,batch Priority=1000 Preemptible=yes "
            "Preempts=none GraceTime=20 PriceFactor=0.40 Product=\"Plan B spot API and batch\"",
            "Tier=P2 QOS=p2-spot Aliases=p2,plan-a-spot,elastic Priority=5000 Preemptible=yes "
            "Preempts=P3 GraceTime=20 PriceFactor=0.35 Product=\"Plan A spot instances and elastic "
            "training\""]
    c.reload_planc_conf(conf)
    spot, p = c.sbatch("-A", "acct-api", "--qos=p3-spot", "--gres=gpu:4", "--spot-fallback",
                       "--wrap", "trap '' TERM; sleep 600", user="pccarol")
    assert spot, p.stderr
    bid, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:4", "--bid=15", "--wrap",
                      "trap '' TERM; sleep 600", user="pcbob")
    assert bid, p.stderr
    c.wait_for("both to run", lambda: c.state(spot) == "RUNNING" and c.state(bid) == "RUNNING",
               timeout=60)
    assert life_field(admin_comment(c, bid), "state") == "matched"
    # 6 GPUs (the 80% cap of one node): both 4-GPU jobs must go.
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:6", "--wrap", "sleep 600",
                     user="pcalice")
    assert p0, p.stderr
    c.wait_for("both in their grace", lambda: all(
        "planc: preempted" in admin_comment(c, j) for j in (spot, bid)), timeout=60)
    offset = c.log_offset()
    c.ctl("restart-ctld")
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=90)
    c.wait_for("the P3 job back in p1-guaranteed",
               lambda: c.squeue_field(spot, "%q") == "p1-guaranteed", timeout=60)
    # The P2 job was held at its requeue and bid again: its life is for its
    # next run now (a later round may have matched it already; the P0 job
    # keeps it from starting).
    c.wait_for("the requeue's hold", lambda: f"slurmctld/planc: market: JobId={bid} requeued: "
               "held, it bids again" in c.log_since(offset), timeout=60)
    comment = admin_comment(c, bid)
    assert life_field(comment, "state") == "waiting" or life_field(comment, "run") == "1", comment
    assert c.state(bid) == "PENDING"
    c.cancel_all()
    c.reload_planc_conf([])


def test_a_release_slurm_refuses_is_taken_again_not_mistaken_for_the_owners_hold(small_cluster):
    """Slurm refuses every update of a job whose database index is still
    being set (slurmdbd slow or away; frozen here with SIGSTOP): a round's
    release of a winning bid fails.  The market keeps the bid's life as it
    was (its hold is the market's, not its owner's), takes the same step at
    a later round, and once slurmdbd answers the job runs."""
    import os
    import signal
    c = small_cluster
    c.cancel_all()
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s"])
    with open(os.path.join(c.dir, "run", "slurmdbd.pid")) as f:
        dbd = int(f.read().split()[0])
    offset = c.log_offset()
    os.kill(dbd, signal.SIGSTOP)
    try:
        bid, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--bid=15",
                          "--wrap", "sleep 300", user="pcbob")
        assert bid, p.stderr
        c.wait_for("a refused release", lambda: re.search(
            rf"market: JobId={bid}: release failed: .*DB index", c.log_since(offset)), timeout=60)
        comment = admin_comment(c, bid)
        assert life_field(comment, "state") == "waiting", comment
        assert life_field(comment, "hold") != "owner", comment
        assert c.state(bid) == "PENDING"
    finally:
        os.kill(dbd, signal.SIGCONT)
    c.wait_for("the bid to run", lambda: c.state(bid) == "RUNNING", timeout=120)
    comment = admin_comment(c, bid)
    assert life_field(comment, "state") == "matched", comment
    log = c.log_since(offset)
    assert f"JobId={bid} win expired" not in log and "held by its owner" not in log, log
    c.cancel_all()
    c.reload_planc_conf([])
