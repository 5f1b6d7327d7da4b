"""The P2 market on the private cluster (issue 15): the sbatch options
spank/planc adds (--bid, --lock-price, --spot-fallback), every bad input
refused by job_submit/planc with its message, the floor slurmctld/planc
sets from the vacancy at each round (Market=yes), and the clearing: bids
held for a round, the highest that fit released at one price, the others
told why and when the next round is, and bills at the matched price; a
booking's locked price billed after the floor moved; a --spot-fallback P3
job preempted by a P0 job back in p1-guaranteed."""
import json
import os
import re
from datetime import datetime, timedelta

import pytest

from conftest import ROOT

BILL_TOOL = os.path.join(ROOT, "planc-bill")

LIST = "20.00"  # planc.conf.example: CardHourPrice h800 20, CardHourPriceFloor 10


@pytest.fixture(scope="module")
def market(cluster):
    cluster.cancel_all()
    cluster.reload_planc_conf(["Market=yes", "MarketInterval=2s"])
    yield cluster
    cluster.cancel_all()
    cluster.reload_planc_conf([])


def sbatch_err(c, *args, user="pcbob", account="acct-spot", qos="p2-spot"):
    """sbatch's stderr for a submission that must be refused."""
    jobid, p = c.sbatch("-A", account, f"--qos={qos}", "--gres=gpu:1", *args, "--wrap", "sleep 60",
                        user=user)
    assert not jobid, f"accepted as {jobid}: {args}"
    return p.stderr


def test_market_closed(cluster):
    """Market=no (the default): the options that need it are refused, and
    planc-bill market says the market is not open."""
    c = cluster
    c.reload_planc_conf([])
    err = sbatch_err(c, "--bid=12")
    assert ("sbatch: error: the P2 spot market is not open on this cluster (planc.conf Market=no): "
            "leave --bid out, and the job takes the P2 price") in err, err
    out = c.run(BILL_TOOL, "market", user="pcbob", check=True).stdout
    assert out == "The P2 spot market is not open on this cluster (planc.conf Market=no).\n", out


CASES = [
    (["--bid=cheap"], {}, "--bid=cheap is not a price: give a card-hour price in CNY, e.g. --bid=12.50"),
    (["--bid=12"], {"qos": "p3-spot"},
     "--bid is for P2 jobs (the spot market); this job is P3: submit it with --qos=p2-spot, or "
     "leave --bid out"),
    (["--bid=5"], {},
     f"--bid=5 is below the market's minimum of 6.00 CNY per card-hour (0.30 of the list price "
     f"{LIST}): bid at least 6.00"),
    (["--bid=25"], {},
     f"--bid=25 is above the list price of {LIST} CNY per card-hour: a guaranteed tier costs "
     f"that; bid at most {LIST}"),
    (["--lock-price"], {},
     "--lock-price needs --begin: a price is locked for a job booked ahead, e.g. "
     "--begin=now+2hours --lock-price"),
    (["--lock-price", "--begin=now+30hours"], {},
     "--lock-price: --begin is 30 h ahead; a price can be locked at most 24 h ahead: book nearer "
     "the start, or leave --lock-price out"),
    (["--lock-price"], {"qos": "p3-spot", "account": "acct-spot"},
     "--lock-price is for P2 jobs (the spot market); this job is P3: submit it with "
     "--qos=p2-spot, or leave --lock-price out"),
    (["--spot-fallback"], {"qos": "p0-lease", "account": "acct-lease", "user": "pcalice"},
     "--spot-fallback is for P2 and P3 jobs; this job is P0, which is never preempted: leave "
     "--spot-fallback out"),
    (["--spot-fallback"], {"qos": "p3-spot"},
     "--spot-fallback: account acct-spot may not use a guaranteed tier to fall back to; ask your "
     "admin to add one to the account, or leave --spot-fallback out"),
]


@pytest.mark.parametrize("args,kw,message", CASES, ids=[" ".join(c[0]) + " " + c[1].get("qos", "p2-spot")
                                                         for c in CASES])
def test_bad_market_input_is_refused_with_its_message(market, args, kw, message):
    err = sbatch_err(market, *args, **kw)
    assert f"sbatch: error: {message}\n" in err, err


def test_bid_and_lock_together_are_refused(market):
    err = sbatch_err(market, "--bid=12", "--lock-price", "--begin=now+1hour")
    assert ("sbatch: error: --bid and --lock-price together: a locked booking pays the floor at "
            "booking and takes part in no round; give one of them\n") in err, err


def market_config(c):
    out = c.run("scontrol", "show", "config", check=True).stdout
    section = out[out.index("----- slurmctld/planc"):]
    return dict(re.findall(r"^(Market\w*)\s+= (.*)$", section, re.M))


def next_round(c, after):
    """The market's state once a round later than `after` has set the floors."""
    return c.wait_for("a market round", lambda: (lambda m: m if m.get("MarketLastRound", "none yet")
                                                 not in ("none yet", after) else None)(
        market_config(c)), timeout=60, interval=0.5)


def test_an_idle_pool_lowers_the_floor_and_the_minimum_holds(market):
    c = market
    c.cancel_all()
    # Rounds every 2 s; the pool is idle, so the vacancy over a round is 1.
    c.reload_planc_conf(["Market=yes", "MarketInterval=2s", "MarketFloorCurve=0:1.0,0.3:0.8"])
    first = next_round(c, None)
    m = next_round(c, first["MarketLastRound"])
    assert m["MarketVacancy"] == "1.00", m
    # Flat beyond the curve's last point: 0.8 x CardHourPriceFloor.
    assert m["MarketFloor"] == "default=8.00,h800=8.00 CNY/card-hour", m
    # What a user sees (any user: scontrol show config is public).
    out = c.run(BILL_TOOL, "market", user="pcbob", check=True).stdout
    assert out.startswith("Current floor: other GPUs @ 8.00 CNY/card-hour (-60% vs list 20.00)\n"
                          "               H800 @ 8.00 CNY/card-hour (-60% vs list 20.00)\n"
                          "Vacancy:       1.00 of the GPUs idle"), out
    js = json.loads(c.run(BILL_TOOL, "market", "--json", user="pcbob", check=True).stdout)
    assert js["market"] == "open" and js["floors"][1] == {
        "gpu_type": "h800", "floor": "8.00", "list": "20.00", "vs_list_percent": -60}, js
    # A curve that would go below 30% of list stops there (6.00 of 20.00).
    c.reload_planc_conf(["Market=yes", "MarketInterval=2s", "MarketFloorCurve=0:1.0,1:0.1"])
    m = next_round(c, next_round(c, None)["MarketLastRound"])
    assert m["MarketFloor"] == "default=6.00,h800=6.00 CNY/card-hour", m
    assert m["MarketMinFraction"] == "0.30"
    out = c.run(BILL_TOOL, "market", user="pcbob", check=True).stdout
    assert "H800 @ 6.00 CNY/card-hour (-70% vs list 20.00)" in out, out
    # A bid at the minimum is taken.
    jobid, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--bid=6", "--wrap",
                        "sleep 1", user="pcbob")
    assert jobid, p.stderr
    c.cancel_all()


def admin_comment(c, jobid):
    out = c.run("scontrol", "show", "job", jobid, check=True).stdout
    m = re.search(r"^\s*AdminComment=(.*?)\s*$", out, re.M)
    return m.group(1) if m else ""


def matched(price, round_at, run=0, gpus=8, nodes=1, gpu_type="any", bid="15.00",
            account="acct-spot", partition="gpu"):
    """A winner's market life, as its AdminComment says it (common/market_life.h)."""
    start_by = (datetime.fromisoformat(round_at.replace("Z", "+00:00")) +
                timedelta(seconds=round_interval(round_at))).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"[planc:market] matched price={price} currency=CNY round={round_at} "
            f"start-by={start_by} run={run} gpus={gpus} nodes={nodes} type={gpu_type} "
            f"account={account} partition={partition} bid={bid}")


# The market's interval of the test running now (matched() computes a
# winner's start-by from it).
_INTERVAL = {"seconds": 900}


def round_interval(_at):
    return _INTERVAL["seconds"]


def life_field(comment, key):
    """One key=value of the market's mark in an AdminComment."""
    m = re.search(r"\[planc:market\] (\w+)((?: [\w-]+=\S*)*)", comment)
    if not m:
        return None
    if key == "state":
        return m.group(1)
    f = dict(w.split("=", 1) for w in m.group(2).split())
    return f.get(key)


def test_three_bids_for_room_for_two(market):
    """15, 12 and 9 per card-hour for 8 GPUs each, with 16 GPUs offered
    (two P0 jobs hold the other 16): 15 and 12 run at 9.00, the highest
    losing bid; 9 waits, told why and when the next round is; a P0 job
    ends, and 9 wins the next round at the floor.  The bills say so."""
    from test_billing import psql
    c = market
    c.cancel_all()
    # Rounds every 20 s (the three bids land in one); floor 5 x the curve,
    # never under 30% of list: 6.00.
    c.reload_planc_conf(["Market=yes", "MarketInterval=20s", "CardHourPriceFloor=5"])
    _INTERVAL["seconds"] = 20
    p0 = []
    for _ in range(2):
        j, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:8", "--wrap", "sleep 600",
                        user="pcalice")
        assert j, p.stderr
        p0.append(j)
    c.wait_for("the P0 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in p0), timeout=60)
    last = next_round(c, None)["MarketLastRound"]
    bids = {}
    for price in (15, 12, 9):
        j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:8", f"--bid={price}",
                        "--wrap", "sleep 600", user="pcbob")
        assert j, p.stderr
        assert (f"sbatch: P2 spot market: your bid {price}.00 CNY/card-hour; the job waits for the "
                "round at ") in p.stderr, p.stderr
        bids[price] = j
    for j in bids.values():
        # Held from submission (Slurm calls a hold set at submission the
        # owner's; the market's life says whose it is).
        assert c.squeue_field(j, "%r") in ("JobHeldUser", "JobHeldAdmin")
    for price, j in bids.items():
        assert admin_comment(c, j).startswith(
            f"[planc:market] waiting bid={price}.00 currency=CNY reason=new since="), \
            admin_comment(c, j)
    round_ = next_round(c, last)
    c.wait_for("15 and 12 to run", lambda: all(c.state(bids[p]) == "RUNNING" for p in (15, 12)),
               timeout=60)
    for price in (15, 12):
        assert admin_comment(c, bids[price]) == matched(
            "9.00", round_["MarketLastRound"], bid=f"{price}.00"), admin_comment(c, bids[price])
    assert c.state(bids[9]) == "PENDING"
    assert c.squeue_field(bids[9], "%r") in ("JobHeldUser", "JobHeldAdmin")
    out = c.run(BILL_TOOL, "market", user="pcbob", check=True).stdout
    assert (f"Last clearing: 9.00 CNY/card-hour at {round_['MarketLastRound']}, 2 of 3 bid(s) "
            "matched\n") in out, out
    # The owner's own jobs, each with its market text.
    mine = out[out.index("Your P2 jobs:  "):].splitlines()
    assert sorted(line[15:].split(":")[0] for line in mine) == sorted(
        [f"{bids[15]} R", f"{bids[12]} R", f"{bids[9]} PD"]), out
    assert (f" {bids[15]} R: bid 15.00 CNY/card-hour; matched at 9.00 CNY/card-hour in the round "
            f"at {round_['MarketLastRound']} for its run 0 (starts by ") in out, out
    assert (f" {bids[9]} PD: bid 9.00 CNY/card-hour; not matched in the last round: outbid "
            "(rounds every 20 s)\n") in out, out
    other = c.run(BILL_TOOL, "market", user="pcalice", check=True).stdout
    assert "Your P2 jobs:  none in the market\n" in other, other
    loser = admin_comment(c, bids[9])
    assert re.fullmatch(r"\[planc:market\] waiting bid=9\.00 currency=CNY reason=outbid "
                        r"since=\S+Z", loser), loser
    # The next round, nothing changed: 9 is not updated (its mark says the
    # same), and says so in the log: one line per round.
    settled = next_round(c, round_["MarketLastRound"])  # the winners' jobs updated by now
    again = next_round(c, settled["MarketLastRound"])
    assert admin_comment(c, bids[9]) == loser
    assert int(again["MarketRounds"]) > int(settled["MarketRounds"])
    assert again["MarketJobUpdates"] == settled["MarketJobUpdates"], (settled, again)
    # 8 GPUs free up: the next round takes 9, alone: the floor.
    c.run("scancel", p0[0], check=True)
    c.wait_for("9 to run", lambda: c.state(bids[9]) == "RUNNING", timeout=90)
    assert life_field(admin_comment(c, bids[9]), "price") == "6.00", admin_comment(c, bids[9])
    # 9 runs a few seconds before the cancel (squeue's TIME, %M, moving on):
    # a run cancelled in the second it started has no length, and the
    # expected interruption below counts runs that lasted.
    c.wait_for("9 to have run 2 s", lambda: c.squeue_field(bids[9], "%M") not in (
        "0:00", "0:01"), timeout=30)
    # The bills: cards at the matched price.
    c.run("scancel", *bids.values(), check=True)
    ids = ",".join(bids.values())
    rows = c.wait_for("the three bills", lambda: (lambda r: r if len(r) == 3 else None)(psql(
        c, f"SELECT job_id, card_hour_price FROM planc.bill WHERE job_id IN ({ids}) "
        "ORDER BY job_id")), timeout=60)
    got = {r[0]: r[1] for r in rows}
    assert got == {bids[15]: "9.000000", bids[12]: "9.000000", bids[9]: "6.000000"}, rows
    # The expected interruption, as any user sees it: every user's P2 runs
    # of the last 24 h (planc.p2_runs), against the bills read as an admin.
    # Shown to pcalice, who may read none of these bills (they are pcbob's).
    runs, preempted, mean = psql(
        c, "SELECT count(*), count(*) FILTER (WHERE state = 'PREEMPTED'), "
        "avg(extract(epoch FROM end_time - start_time)) FROM planc.bill WHERE tier = 'P2' "
        "AND end_time > now() - interval '24 hours' AND end_time > start_time")[0]
    assert int(runs) >= 3
    h = float(mean) / 3600
    hours = f"{h:.2f}" if h < 1 else f"{h:.1f}"
    out = c.run(BILL_TOOL, "market", user="pcalice", check=True).stdout
    assert ("Expected interruption: may be preempted by P0 or P1 (guaranteed work); P2 jobs have "
            f"run {hours} h on average in the last 24 h ({runs} runs ended, {preempted} "
            "preempted)\n") in out, out
    js = json.loads(c.run(BILL_TOOL, "market", "--json", user="pcalice",
                          check=True).stdout)
    assert js["expected_interruption"] == {"window_hours": 24, "p2_runs": int(runs),
                                           "preempted": int(preempted),
                                           "mean_run_hours": hours}, js
    check_round_records(c, round_["MarketLastRound"], bids)


def check_round_records(c, at, bids):
    """The round in which 15 and 12 won (at `at`), as PostgreSQL has it
    (sql/0006, stored by slurmctld/planc's recorder), and its bids: public
    summaries for everyone, the bids for their owner only."""
    from test_billing import psql
    row = c.wait_for("the round's record in PostgreSQL", lambda: (lambda r: r[0] if r else None)(
        psql(c, "SELECT capacity_gpus, allocated_gpus, floor_micros, list_micros, "
             "clearing_micros, bids, winners FROM planc.market_round "
             "WHERE round_at = :'p0'::timestamptz AND gpu_type = 'default'", at)), timeout=30)
    assert row == ["16", "16", "6000000", "20000000", "9000000", "3", "2"], row
    got = psql(c, "SELECT job_id, user_name, account, bid_micros, gpus, outcome, pays_micros "
               "FROM planc.market_bid WHERE round_at = :'p0'::timestamptz ORDER BY job_id", at)
    assert sorted(got) == sorted([
        [bids[15], "pcbob", "acct-spot", "15000000", "8", "won", "9000000"],
        [bids[12], "pcbob", "acct-spot", "12000000", "8", "won", "9000000"],
        [bids[9], "pcbob", "acct-spot", "9000000", "8", "outbid", "0"]]), got
    # The later round that took 9 alone, at the floor.
    won9 = psql(c, "SELECT r.clearing_micros, b.pays_micros FROM planc.market_bid b "
                "JOIN planc.market_round r USING (cluster, round_at, gpu_type) "
                "WHERE b.job_id = :'p0' AND b.outcome = 'won'", bids[9])
    assert won9 == [["6000000", "6000000"]], won9
    # What users see: every round (public), their own bids only (RLS).
    hist = json.loads(c.run(BILL_TOOL, "market", "history", "--json", "--utc", user="pcalice",
                            check=True).stdout)
    mine = [h for h in hist if h["Round"] == at]
    assert mine == [{"Round": at, "GPUType": "default", "OfferedGPUs": 16, "Vacancy": mine[0]["Vacancy"],
                     "Floor": 6.00, "List": 20.00, "Clearing": 9.00, "Bids": 3, "Winners": 2}], mine
    table = c.run(BILL_TOOL, "market", "history", user="pcbob", check=True).stdout
    assert table.splitlines()[0].split() == ["Round", "GPUType", "OfferedGPUs", "Vacancy", "Floor",
                                             "List", "Clearing", "Bids", "Winners"], table
    own = json.loads(c.run(BILL_TOOL, "market", "bids", "--json", "--utc", user="pcbob",
                           check=True).stdout)
    round_bids = sorted((b["JobID"], b["Bid"], b["Outcome"], b["Pays"]) for b in own
                        if b["Round"] == at)
    # Job ids are text, as in every listing (an array task is 7_3).
    assert round_bids == sorted([(bids[15], 15.00, "won", 9.00),
                                 (bids[12], 12.00, "won", 9.00),
                                 (bids[9], 9.00, "outbid", 0.00)]), own
    other = json.loads(c.run(BILL_TOOL, "market", "bids", "--json", "--utc", user="pcalice",
                             check=True).stdout)
    assert not [b for b in other if str(b["JobID"]) in bids.values()], other
    # Nothing waits or was set aside.
    m = market_config(c)
    assert m["MarketRoundsWaiting"] == "0" and m["MarketRoundsRejected"] == "0", m
    assert int(m["MarketRoundsRecorded"]) >= 2, m


def test_a_bid_is_not_released_by_its_owner(market):
    """A bid waits, held, for the round it wins.  Its owner's `scontrol
    release` is refused (it would run outside every round, at the fixed P2
    price) and slurmctld's log says why; its owner's own hold, though, is
    theirs to release.  An operator's release is Slurm's power: the job
    runs outside the rounds and pays the floor, and the log says who."""
    import pwd
    from test_billing import psql
    c = market
    c.cancel_all()
    # No round during the test: the first comes 10 min after the reload.
    c.reload_planc_conf(["Market=yes", "MarketInterval=10min"])
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--bid=15", "--wrap",
                    "sleep 60", user="pcbob")
    assert j, p.stderr
    assert c.squeue_field(j, "%r") == "JobHeldUser"
    offset = c.log_offset()
    r = c.run("scontrol", "release", j, user="pcbob")
    assert r.returncode != 0
    # scontrol's own words (22.05 passes no text of the plugin's to it).
    assert r.stderr.splitlines() == [f"Access/permission denied for job {j}",
                                     "slurm_suspend error: Access/permission denied"], r.stderr
    assert c.state(j) == "PENDING" and c.squeue_field(j, "%r") == "JobHeldUser"
    uid = pwd.getpwnam("pcbob").pw_uid
    assert (f"job_submit/planc: update of JobId={j} by uid {uid} refused: JobId={j} bids in the "
            "P2 market: the round it wins releases it (rounds every 10 min); it cannot be "
            "released by hand.  To run it outside the market, cancel it and submit it to another "
            "tier") in c.log_since(offset)
    # Its owner holds it (out of the rounds), then releases that hold: the
    # market's stays.
    c.run("scontrol", "hold", j, user="pcbob", check=True)
    assert life_field(admin_comment(c, j), "hold") == "owner", admin_comment(c, j)
    c.run("scontrol", "release", j, user="pcbob", check=True)
    assert life_field(admin_comment(c, j), "hold") is None, admin_comment(c, j)
    assert c.state(j) == "PENDING"
    # An operator (pcops, AdminLevel=Operator) may: it starts outside the
    # rounds, at the floor when it starts.
    floor = market_config(c)["MarketFloor"].split(",")[0].split("=")[1]
    ops = pwd.getpwnam("pcops").pw_uid
    c.run("scontrol", "release", j, user="pcops", check=True)
    c.wait_for("the job to run", lambda: c.state(j) == "RUNNING", timeout=30)
    log = c.log_since(offset)
    assert (f"job_submit/planc: market: JobId={j} bid in the P2 market and was released by an "
            "operator: its next run starts outside the rounds, billed at the floor when it starts "
            f"(uid {ops}'s update)") in log, log
    assert f"slurmctld/planc: market: JobId={j} started outside the rounds (operator): billed at " \
        "the floor " in log, log
    comment = admin_comment(c, j)
    assert life_field(comment, "state") == "outside" and life_field(comment, "run") == "0", comment
    assert life_field(comment, "price") == floor, (comment, floor)
    c.wait_for("2 s of run", lambda: c.squeue_field(j, "%M") not in ("0:00", "0:01"), timeout=30)
    c.run("scancel", j, check=True)
    rows = c.wait_for("its bill", lambda: psql(
        c, "SELECT card_hour_price, note FROM planc.bill WHERE job_id = :'p0'", j), timeout=60)
    assert rows[0][0] == f"{float(floor):.6f}", rows
    assert "P2 market: cards at the floor " in rows[0][1], rows
    c.cancel_all()


def test_rounds_wait_while_postgresql_is_down_and_none_is_lost(market):
    """PostgreSQL stopped: every round's record waits as a file in
    StateSaveLocation/planc_market/ (MarketRoundsWaiting counts them); it
    starts again: each is stored once, and the files are gone."""
    from test_billing import pg_ctl, psql
    c = market
    c.cancel_all()
    c.reload_planc_conf(["Market=yes", "MarketInterval=2s"])
    spool = os.path.join(c.dir, "state", "ctld", "planc_market")
    c.wait_for("the recorder to have caught up", lambda: market_config(c).get(
        "MarketRoundsWaiting") == "0", timeout=30)
    pg_ctl(c, "stop")
    try:
        m = c.wait_for("three rounds waiting", lambda: (lambda m: m if int(m.get(
            "MarketRoundsWaiting", "0")) >= 3 else None)(market_config(c)), timeout=60)
        waiting = sorted(n for n in os.listdir(spool) if n.endswith(".rec"))
        assert len(waiting) >= 3, (waiting, m)
        assert oct(os.stat(spool).st_mode & 0o777) == "0o700"
    finally:
        up = c.ctl("up", check=False, timeout=300)  # starts PostgreSQL again
        assert up.returncode == 0, up.stdout + up.stderr
    # Each file's round (round-<epoch>-default.rec) is in the table, once.
    epochs = [n.split("-")[1] for n in waiting]
    c.wait_for("the waiting rounds to be stored", lambda: not [
        n for n in waiting if os.path.exists(os.path.join(spool, n))], timeout=120)
    rows = psql(c, "SELECT extract(epoch FROM round_at)::bigint, count(*) FROM planc.market_round "
                "WHERE extract(epoch FROM round_at)::bigint = ANY(string_to_array(:'p0', ',')"
                "::bigint[]) GROUP BY 1 ORDER BY 1", ",".join(epochs))
    assert rows == [[e, "1"] for e in sorted(epochs, key=int)], rows
    m = market_config(c)
    assert m["MarketRoundsRejected"] == "0", m
    assert not [n for n in os.listdir(spool) if n.endswith(".rejected")]


def floor_now(c):
    return market_config(c).get("MarketFloor")


def test_a_locked_price_is_billed_after_the_floor_moved(market):
    """A booking made while the pool is full (floor 10.00) locks 10.00; the
    pool empties, the floor falls to 8.00 (30% idle: -20%), and the job,
    starting at its --begin time, is billed at 10.00."""
    from test_billing import psql
    c = market
    c.cancel_all()
    c.reload_planc_conf(["Market=yes", "MarketInterval=3s", "MarketFloorCurve=0:1.0,0.3:0.8"])
    # Three P0 jobs (24 GPUs, under the 80% cap) and a P3 job fill the pool.
    fill = []
    for qos, acct, user in [("p0-lease", "acct-lease", "pcalice")] * 3 + [
            ("p3-spot", "acct-spot", "pcbob")]:
        j, p = c.sbatch("-A", acct, f"--qos={qos}", "--gres=gpu:8", "--wrap", "sleep 600",
                        user=user)
        assert j, p.stderr
        fill.append(j)
    c.wait_for("the pool to fill", lambda: all(c.state(j) == "RUNNING" for j in fill), timeout=60)
    busy = "default=10.00,h800=10.00 CNY/card-hour"
    m = next_round(c, None)
    c.wait_for("a round over a full pool", lambda: (lambda m: m if m["MarketVacancy"] == "0.00"
                                                    and m["MarketFloor"] == busy else None)(
        next_round(c, m["MarketLastRound"])), timeout=60)
    jobid, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:1", "--lock-price",
                        "--begin=now+40", "--wrap", "sleep 2", user="pcbob")
    assert jobid, p.stderr
    assert ("sbatch: P2 spot market: price locked at 10.00 CNY/card-hour (the floor now) for its "
            "run from ") in p.stderr, p.stderr
    assert admin_comment(c, jobid).startswith(
        "[planc:market] locked price=10.00 currency=CNY booked="), admin_comment(c, jobid)
    assert c.squeue_field(jobid, "%r") == "BeginTime"  # not held: it waits for its --begin
    c.run("scancel", *fill, check=True)
    c.wait_for("the floor to fall", lambda: floor_now(c) == "default=8.00,h800=8.00 CNY/card-hour",
               timeout=60)
    assert c.state(jobid) == "PENDING"  # the floor moved before the job started
    c.wait_for("the booked job to run and end", lambda: c.state(jobid) == "GONE", timeout=120)
    rows = c.wait_for("its bill", lambda: psql(
        c, "SELECT card_hour_price, note, state FROM planc.bill WHERE job_id = :'p0'", jobid),
        timeout=60)
    assert rows[0][0] == "10.000000", rows
    assert "P2 market: cards at the locked 10.00 CNY/card-hour" in rows[0][1], rows
    assert rows[0][2] == "COMPLETED", rows


def test_spot_fallback_brings_a_preempted_p3_job_back_in_p1(small_cluster):
    """One node, one possible victim: a --spot-fallback P3 job (acct-api,
    whose guaranteed tier is P1) preempted by a P0 job comes back pending
    in p1-guaranteed; squeue, its AdminComment and its next bill say so."""
    from test_billing import psql
    c = small_cluster
    c.set_planc_conf([])
    c.cancel_all()
    j, p = c.sbatch("-A", "acct-api", "--qos=p3-spot", "--gres=gpu:4", "--spot-fallback",
                    "--wrap", "sleep 600", user="pccarol")
    assert j, p.stderr
    assert ("sbatch: --spot-fallback: a preempted run of this job comes back in P1 "
            "(p1-guaranteed), billed at P1's price from then on") in p.stderr, p.stderr
    assert admin_comment(c, j) == ("[planc:fallback] a preempted run comes back in P1 "
                                   "(p1-guaranteed)"), admin_comment(c, j)
    c.wait_for("the P3 job to run", lambda: c.state(j) == "RUNNING", timeout=60)
    assert c.squeue_field(j, "%q") == "p3-spot"
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:6", "--wrap", "sleep 600",
                     user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=60)
    c.wait_for("the preempted job back in p1-guaranteed",
               lambda: c.squeue_field(j, "%q") == "p1-guaranteed", timeout=30)
    assert c.state(j) == "PENDING"
    text = admin_comment(c, j)
    assert re.match(r"^\[planc:fallback\] preempted as P3 at \S+Z; requeued in P1 "
                    r"\(p1-guaranteed\), billed at P1's price from the next run \| planc: "
                    r"preempted", text), text
    # The P0 job ends; the job runs again, as P1.
    c.end_now(p0)
    c.wait_for("the job to run as P1", lambda: c.state(j) == "RUNNING", timeout=90)
    c.run("scancel", j, check=True)
    rows = c.wait_for("both bills", lambda: (lambda r: r if len(r) == 2 else None)(psql(
        c, "SELECT segment, tier, qos, state, amount_minor FROM planc.bill WHERE job_id = :'p0' "
        "ORDER BY segment", j)), timeout=60)
    assert [r[:4] for r in rows] == [["0", "P3", "p3-spot", "PREEMPTED"],
                                     ["1", "P1", "p1-guaranteed", "CANCELLED"]], rows
    assert rows[0][4] == "0", rows  # the preempted run is free


@pytest.fixture(scope="module")
def typed_market():
    """A 2-node cluster of its own: gpu1's 8 GPUs are H800s, gpu2's A100s
    (gres.conf Type=), the market open with flat floors."""
    from conftest import start_cluster, stop_cluster, worker_overrides
    o = worker_overrides({"PLANC_NODES": "2", "PLANC_GPU_TYPES": "h800 a100"}, offset=120)
    o["PLANC_CLUSTER_DIR"] = o.get("PLANC_CLUSTER_DIR", "/tmp/planc-cluster") + "-typed"
    c = start_cluster(o)
    # H800 at 20 and A100 at 12 per card-hour, floors 10 whatever the
    # vacancy (a flat curve); rounds every 10 s.
    c.reload_planc_conf(["Market=yes", "MarketInterval=10s", "CardHourPrice=h800:20.00,a100:12.00",
                         "MarketFloorCurve=0:1.0,1:1.0"])
    _INTERVAL["seconds"] = 10
    yield c
    c.cancel_all()
    stop_cluster(c)


def test_one_market_per_gpu_type(typed_market):
    """Two H800 bids (18, 16) and an A100 bid (11), 8 GPUs each, on a
    cluster of one H800 node and one A100 node: the H800 market has room
    for one, so 18 wins and pays 16, the highest losing H800 bid; the A100
    market is a market of its own, so 11 wins at the A100 floor even
    though it bids below both H800 bids.  Each market's round is its own
    record in PostgreSQL."""
    from test_billing import psql
    c = typed_market
    m = market_config(c)
    assert m["MarketFloor"] == "default=10.00,a100=10.00,h800=10.00 CNY/card-hour", m
    last = next_round(c, None)["MarketLastRound"]
    bids = {}
    for price, gpu in ((18, "h800"), (16, "h800"), (11, "a100")):
        j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", f"--gres=gpu:{gpu}:8", f"--bid={price}",
                        "--wrap", "sleep 600", user="pcbob")
        assert j, p.stderr
        bids[price] = j
    round_ = next_round(c, last)
    at = round_["MarketLastRound"]
    c.wait_for("18 and 11 to run", lambda: all(c.state(bids[p]) == "RUNNING" for p in (18, 11)),
               timeout=60)
    assert c.squeue_field(bids[18], "%N") == "gpu1" and c.squeue_field(bids[11], "%N") == "gpu2"
    _INTERVAL["seconds"] = 10
    assert admin_comment(c, bids[18]) == matched("16.00", at, gpu_type="h800", bid="18.00",
                                                 partition="gpu"), admin_comment(c, bids[18])
    assert admin_comment(c, bids[11]) == matched("10.00", at, gpu_type="a100", bid="11.00"), \
        admin_comment(c, bids[11])
    assert c.state(bids[16]) == "PENDING"
    assert life_field(admin_comment(c, bids[16]), "reason") == "outbid", admin_comment(c, bids[16])
    assert market_config(c)["MarketLastClearing"] == (
        f"a100 10.00 CNY/card-hour at {at}, 1 of 1 bid(s) matched; h800 16.00 CNY/card-hour at "
        f"{at}, 1 of 2 bid(s) matched"), market_config(c)
    rows = c.wait_for("both rounds' records in PostgreSQL", lambda: (lambda r: r if len(r) == 2
                                                                     else None)(
        psql(c, "SELECT gpu_type, capacity_gpus, allocated_gpus, floor_micros, list_micros, "
             "clearing_micros, bids, winners FROM planc.market_round "
             "WHERE round_at = :'p0'::timestamptz ORDER BY gpu_type", at)), timeout=30)
    assert rows == [["a100", "8", "8", "10000000", "12000000", "10000000", "1", "1"],
                    ["h800", "8", "8", "10000000", "20000000", "16000000", "2", "1"]], rows
    c.cancel_all()


def test_a_matched_job_preempted_and_requeued_bids_again(typed_market):
    """A P2 bid matched in a round keeps its price for that run only: a P0
    job for the H800 node preempts it, and once requeued it is held for
    the next round with its mark back to waiting; it wins again only when
    the H800 node is free, in a later round."""
    c = typed_market
    c.cancel_all()
    last = next_round(c, None)["MarketLastRound"]
    j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:h800:8", "--bid=15", "--wrap",
                    "sleep 600", user="pcbob")
    assert j, p.stderr
    first = next_round(c, last)["MarketLastRound"]
    c.wait_for("the bid to run", lambda: c.state(j) == "RUNNING", timeout=60)
    _INTERVAL["seconds"] = 10
    assert admin_comment(c, j) == matched("10.00", first, gpu_type="h800"), admin_comment(c, j)
    offset = c.log_offset()
    p0, p = c.sbatch("-A", "acct-lease", "--qos=p0-lease", "--gres=gpu:h800:8", "--wrap",
                     "sleep 600", user="pcalice")
    assert p0, p.stderr
    c.wait_for("the P0 job to run", lambda: c.state(p0) == "RUNNING", timeout=90)
    c.wait_for("the requeued bid held for the next round", lambda: admin_comment(c, j).startswith(
        "[planc:market] waiting bid=15.00 currency=CNY reason=requeued since="), timeout=30)
    assert c.state(j) == "PENDING" and c.squeue_field(j, "%r") == "JobHeldAdmin"
    assert (f"slurmctld/planc: market: JobId={j} requeued: held, it bids again (a win or a lock "
            "covers one run)") in c.log_since(offset)
    # The H800 node is the P0 job's: guaranteed work holds every H800, so
    # the bid is too large for what P2 can have there.
    r = next_round(c, next_round(c, None)["MarketLastRound"])
    # The round's marks are written to the jobs after the round is
    # recorded (under the job write lock, on a loaded machine a moment
    # later): wait for this one's.
    c.wait_for("the round's mark on the held bid", lambda: life_field(
        admin_comment(c, j), "reason") == "too-large", timeout=30)
    assert c.state(j) == "PENDING"
    c.run("scancel", p0, check=True)
    c.wait_for("the bid to win a later round and run", lambda: c.state(j) == "RUNNING", timeout=90)
    comment = admin_comment(c, j)
    assert life_field(comment, "state") == "matched" and life_field(comment, "run") == "1", comment
    assert life_field(comment, "price") == "10.00", comment
    assert life_field(comment, "round") not in (first, r["MarketLastRound"]), comment
    c.cancel_all()


def test_a_change_of_gpu_type_sends_a_winner_back_to_bid(typed_market):
    """An A100 bid wins while the A100 node is drained (the market counts
    its GPUs), so it cannot start; its owner then asks for H800 cards: the
    win was an A100 one, so the job is held in the same update and bids
    again (reason=changed), never to run at the A100 price.  (Slurm 22.05
    itself leaves a pending job whose TresPerNode changes GPU type unable
    to run, BadConstraints; the market's part is that it is not released
    at its old price.)"""
    c = typed_market
    c.cancel_all()
    _INTERVAL["seconds"] = 10
    c.run("scontrol", "update", "nodename=gpu2", "state=drain", "reason=planc-test", check=True)
    try:
        j, p = c.sbatch("-A", "acct-spot", "--qos=p2-spot", "--gres=gpu:a100:8", "--bid=11",
                        "--wrap", "sleep 600", user="pcbob")
        assert j, p.stderr
        c.wait_for("the A100 win", lambda: life_field(admin_comment(c, j), "state") == "matched",
                   timeout=60)
        assert life_field(admin_comment(c, j), "type") == "a100"
        assert c.state(j) == "PENDING"
        c.run("scontrol", "update", f"jobid={j}", "TresPerNode=gres:gpu:h800:8", user="pcbob",
              check=True)
        comment = admin_comment(c, j)
        assert (life_field(comment, "state"), life_field(comment, "reason")) == (
            "waiting", "changed"), comment
        # Held (priority 0: Slurm starts no held job), whatever reason
        # squeue shows.
        prio, state = c.squeue_field(j, "%Q %T").split()
        assert (prio, state) == ("0", "PENDING"), c.squeue_field(j, "%Q %r")
    finally:
        c.run("scontrol", "update", "nodename=gpu2", "state=resume", check=True)
    c.cancel_all()
