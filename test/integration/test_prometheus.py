"""Debian's real Prometheus, started privately on loopback beside the private
cluster, scrapes planc-exporter every second and evaluates Plan C's rules
with test-sized windows (test/prometheus/test-rules: 1 h becomes 1 min).  A
scenario of real jobs must show in Prometheus's HTTP API as the KPIs it
implies, and the P3 preemption-rate alert must reach `firing`: four P3 jobs
fill the pool, four P2 jobs preempt them all, the starved P3 jobs get their
free P2 attempt, and a P0 job preempts one P2 job (P2 grace 3 s and a
starvation threshold of 4 s in this module's planc.conf).

The Grafana dashboard (etc/grafana/planc-dashboard.json) is checked against
the same Prometheus: its structure is what Grafana imports (Grafana is not
in Debian, so no Grafana runs here), and every panel's query, its variables
filled in as Grafana would, returns data for the scenario.  One Prometheus
and one scenario serve the module's tests."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT

EXPORTER = os.path.join(ROOT, "planc-exporter")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DASHBOARD = os.path.join(ROOT, "etc", "grafana", "planc-dashboard.json")
RULES = os.path.join(ROOT, "etc", "prometheus", "planc-rules.yml")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prom:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path, **params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            return json.loads(urllib.request.urlopen(url, timeout=5).read())
        except urllib.error.HTTPError as e:  # a bad query: the API says why
            try:
                return json.loads(e.read())
            except ValueError:
                return None
        except OSError:
            return None

    def query(self, expr):
        """{frozenset(labels): value} of an instant query."""
        r = self.get("/api/v1/query", query=expr)
        if not r or r.get("status") != "success":
            return None
        return {frozenset((k, v) for k, v in s["metric"].items() if k not in ("job", "instance", "__name__")):
                float(s["value"][1]) for s in r["data"]["result"]}

    def value(self, expr):
        r = self.query(expr)
        return next(iter(r.values())) if r and len(r) == 1 else None


P2_LINE = ("Tier=P2 QOS=p2-spot Aliases=p2,plan-a-spot,elastic Priority=5000 Preemptible=yes "
           "Preempts=P3 GraceTime=3 PriceFactor=0.35")
# 8-GPU jobs on 32 GPUs: free attempts may hold them all here (the default
# share, 10%, is less than one job).
SHORT_CLOCKS = ["StarvationThreshold=4s", "StarvationInterval=1s", "StarvationMaxPercent=100",
                P2_LINE]


@pytest.fixture(scope="module")
def short_clocks(cluster):
    cluster.reload_planc_conf(SHORT_CLOCKS)
    yield cluster
    cluster.cancel_all()
    cluster.reload_planc_conf([])


@pytest.fixture(scope="module")
def prom(short_clocks):
    """planc-exporter (with the bill database) and Prometheus, for the module."""
    from test_exporter import db_conninfo
    cluster = short_clocks
    for tool in (EXPORTER, PROMETHEUS):
        if not os.access(tool, os.X_OK):
            pytest.fail(f"{tool} missing: test/bootstrap installs prometheus and "
                        "prometheus-cpp-dev")
    c = cluster
    c.cancel_all()
    state = os.path.join(c.dir, "state", "ctld")
    # Every job ended before Prometheus starts: its windows see only the scenario.
    for source in ("slurmctld", "preempt", "jobcomp"):
        path = os.path.join(state, f"planc_metrics_{source}")
        t0 = time.time()
        c.wait_for(f"a {source} snapshot written after the queue emptied",
                   lambda: os.path.exists(path) and os.path.getmtime(path) > t0, timeout=30,
                   interval=0.2)
    # The per-job preemption figures count the jobs the per-job cap's ledger
    # holds; it forgets a job within a minute of its end (its sweep runs
    # every 60 s).  Once it holds none, the figures are the scenario's alone.
    c.wait_for("the preemption ledger to forget the ended jobs of earlier modules",
               lambda: re.search(r"^planc_preempt_ledger_jobs 0$", subprocess.run(
                   [EXPORTER, "--once", "--state-dir", state], capture_output=True,
                   text=True).stdout, re.M), timeout=90, interval=1)
    work = tempfile.mkdtemp(prefix="planc-prom-", dir=c.dir)
    exporter_port, prom_port = free_port(), free_port()
    rules = subprocess.run([os.path.join(ROOT, "test", "prometheus", "test-rules"), "--factor",
                            "60"], capture_output=True, text=True, check=True).stdout
    with open(os.path.join(work, "rules.yml"), "w") as f:
        f.write(rules)
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: planc
    static_configs: [{{targets: ["127.0.0.1:{exporter_port}"]}}]
""")
    exporter = subprocess.Popen([EXPORTER, "--listen", f"127.0.0.1:{exporter_port}",
                                 "--state-dir", state, "--database", db_conninfo(c),
                                 "--database-interval", "1"], stderr=subprocess.DEVNULL)
    log = open(os.path.join(work, "prometheus.log"), "w")
    server = subprocess.Popen([PROMETHEUS, f"--config.file={work}/prometheus.yml",
                               f"--storage.tsdb.path={work}/data",
                               f"--web.listen-address=127.0.0.1:{prom_port}"],
                              stdout=log, stderr=subprocess.STDOUT, cwd=work)
    p = Prom(prom_port)
    try:
        c.wait_for("Prometheus to scrape the exporter", lambda: p.value(
            'planc_exporter_source_up{source="jobcomp"}') == 1.0, timeout=60)
        yield c, p
    finally:
        server.terminate()
        exporter.terminate()
        server.wait(timeout=30)
        exporter.wait(timeout=30)
        log.close()
        c.cancel_all()
        shutil.rmtree(work, ignore_errors=True)


def submit(c, user, account, qos, gpus):
    jobid, p = c.sbatch("-A", account, f"--qos={qos}", f"--gres=gpu:{gpus}", "--wrap",
                        "sleep 600", user=user)
    assert jobid, p.stderr
    return jobid


class Scenario:
    """The module's jobs and what Prometheus showed before them.  `shown_at`
    is a moment (Unix time) when Prometheus had the whole scenario in its
    test-sized windows: the dashboard's queries are evaluated then."""


@pytest.fixture(scope="module")
def scenario(prom):
    c, p = prom
    s = Scenario()
    s.c, s.p = c, p
    s.preempted0 = {t: p.value(f'planc_preemptions_total{{tier="{t}"}}') for t in ("P2", "P3")}
    s.upgrades0 = p.value("planc_starvation_upgrades_total")
    # Four P3 jobs fill the pool (4 nodes x 8 GPUs); four P2 jobs preempt
    # them all (P3: no grace); the requeued P3 jobs starve (> 4 s) and get
    # their free attempt as P2, which waits: nothing is left to preempt.
    s.p3 = [submit(c, "pcbob", "acct-spot", "p3-spot", 8) for _ in range(4)]
    c.wait_for("the P3 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in s.p3))
    s.p2 = [submit(c, "pcbob", "acct-spot", "p2-spot", 8) for _ in range(4)]
    c.wait_for("the P2 jobs to run", lambda: all(c.state(j) == "RUNNING" for j in s.p2),
               timeout=90)
    c.wait_for("a starved P3 job on its free P2 attempt",
               lambda: any(c.squeue_field(j, "%q") == "p2-spot" for j in s.p3), timeout=60)
    # A P0 job preempts a P2-tier job (grace 3 s) and starts.
    s.p0 = submit(c, "pcalice", "acct-lease", "p0-lease", 8)
    c.wait_for("the P0 job to run", lambda: c.state(s.p0) == "RUNNING", timeout=60)
    # Everything the scenario implies, in Prometheus at once, while the
    # one-minute windows still hold the preemptions.
    shown = ['planc:sla_attainment:ratio_1h{tier="P0"}', "planc:p3_preemption_rate:ratio_1h",
             "planc:p2_run_seconds_per_preemption:24h", "planc:p2_mean_run_seconds:24h",
             'planc_exporter_source_up{source="database"} == 1', "planc_billed_amount_total"]
    c.wait_for("the scenario in Prometheus: " + ", ".join(shown),
               lambda: all(p.query(q) for q in shown), timeout=60)
    s.shown_at = time.time()
    return s


def test_kpis_and_an_alert_in_a_real_prometheus(scenario):
    from test_billing import psql
    s = scenario
    c, p = s.c, s.p
    # P0 SLA attainment: it started within SlaStartSeconds (40 s).
    sla = c.wait_for("the P0 SLA attainment", lambda: p.value(
        'planc:sla_attainment:ratio_1h{tier="P0"}'), timeout=30)
    assert sla == pytest.approx(1.0), sla
    # Preemptions per job, against Slurm's own record: each requeue here is
    # a preemption.  Which P2-tier job the P0 job takes (a P2 job or a
    # starved P3 job on its free P2 attempt) is the scheduler's choice, so
    # the expected figures come from the jobs' restart counts, per the tier
    # each job was submitted in (a free attempt is still a P3 job).
    def restarts(j):
        return int(c.show_job(j)["Restarts"])
    c.wait_for("Prometheus to see every preemption", lambda: (
        p.value('sum(planc_preemptions_total{tier=~"P2|P3"})')
        == sum(s.preempted0.values()) + sum(restarts(j) for j in s.p2 + s.p3)), timeout=30)
    assert p.value('planc_preemptions_total{tier="P3"}') >= s.preempted0["P3"] + 4
    assert p.value('planc_preemptions_total{tier="P2"}') >= s.preempted0["P2"] + 1
    for tier, jobs in (("P2", s.p2), ("P3", s.p3)):
        counts = [restarts(j) for j in jobs]
        assert p.value(f'planc_preemptions_per_job_24h_max{{tier="{tier}"}}') == max(counts)
        for n in range(1, 5):
            want = sum(1 for k in counts if k == n)
            got = p.value(f'planc_preempted_jobs_24h{{tier="{tier}",preemptions="{n}"}}')
            assert (got or 0.0) == want, (tier, n, got, counts)
    assert p.value("planc_starvation_upgrades_total") >= s.upgrades0 + 1
    # P2 mean run time: the P2-tier segments that ended (preempted ones:
    # all of them here), as the bills have them.
    ids = ",".join(str(int(j)) for j in s.p2 + s.p3 + [s.p0])
    ended = psql(c, "SELECT extract(epoch FROM end_time - start_time) FROM planc.bill "
                 f"WHERE tier = 'P2' AND job_id IN ({ids})")
    want = sum(float(r[0]) for r in ended) / len(ended)
    mean = c.wait_for("the P2 mean run time", lambda: p.value("planc:p2_mean_run_seconds:24h"),
                      timeout=30)
    print(f"\nP2 mean run {mean:.1f} s; the bills of the {len(ended)} ended P2 segments: "
          f"{want:.1f} s")
    assert abs(mean - want) <= 1.5, (mean, want)
    # Utilisation: the P0 job and three P2 jobs fill the pool.
    c.wait_for("a full pool in Prometheus",
               lambda: p.value("planc:gpu_utilisation:ratio") == 1.0, timeout=30)
    by_tier = c.wait_for("utilisation per tier", lambda: (lambda r: r if r and len(r) >= 2 else None)(
        p.query("planc:gpu_utilisation_by_tier:ratio > 0")), timeout=30)
    assert by_tier == {frozenset({("tier", "P0")}): 0.25, frozenset({("tier", "P2")}): 0.75}, \
        by_tier
    # The P3 rate: 4 preemptions over the P3 runs of the last (test-sized)
    # hour: the 4 preempted runs, none running: 1, give or take
    # Prometheus's extrapolation of increase() at the window's edge.
    rate = c.wait_for("the P3 preemption rate", lambda: p.value(
        "planc:p3_preemption_rate:ratio_1h"), timeout=30)
    assert 0.85 <= rate <= 1.15, rate
    # Above 20% for the alert's (test-sized) 15 s: firing.
    def firing():
        r = p.get("/api/v1/alerts")
        alerts = r["data"]["alerts"] if r else []
        return [a for a in alerts if a["labels"].get("alertname") == "PlancP3PreemptionRateHigh"
                and a["state"] == "firing"] or None
    alert = c.wait_for("PlancP3PreemptionRateHigh to fire", firing, timeout=60)[0]
    print("firing:", alert["labels"], alert["annotations"]["summary"])
    assert alert["labels"]["tier"] == "P3" and alert["labels"]["severity"] == "warning"
    assert "of the P3 jobs that ran in the last hour were preempted" in \
        alert["annotations"]["summary"]


# --- the Grafana dashboard ---------------------------------------------------

DS_REF = {"type": "prometheus", "uid": "${datasource}"}
# What Grafana puts in for its own variables.  Prometheus here scrapes every
# second, so a minute holds enough samples for rate().
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "6h"}
# Series that exist only while planc.conf switches the feature on.
FEATURE_SERIES = ("planc_market_", "planc_infusion_")
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def load_dashboard():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def all_panels(d):
    """Every panel, those inside a collapsed row included."""
    for panel in d["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queried(d):
    """(panel, target) of every query the dashboard runs."""
    return [(panel, t) for panel in all_panels(d) if panel["type"] != "row"
            for t in panel["targets"]]


def fill(text, values):
    return VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], text)


def test_the_dashboard_is_one_grafana_imports():
    """Grafana is not in Debian: the file is checked for what Grafana's import
    needs and what would leave a panel empty anywhere (a name no exporter or
    rule has, a data source of this machine's)."""
    d = load_dashboard()
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36, d["schemaVersion"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", d["uid"]) and d["title"]
    assert d.get("id") is None, "an exported dashboard carries no database id"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables.get("datasource")
    assert ds and ds["type"] == "datasource" and ds["query"] == "prometheus", \
        "the Prometheus to read is chosen on import: a datasource variable"
    assert "__inputs" not in d, "no import-time inputs: the datasource variable covers it"
    ids = [panel["id"] for panel in all_panels(d)]
    assert len(ids) == len(set(ids)), ids
    cells = set()
    for panel in all_panels(d):
        g = panel["gridPos"]
        assert panel["title"] and g["w"] >= 1 and g["h"] >= 1 and 0 <= g["x"] <= 24 - g["w"], panel
        cell = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not cell & cells, f"panel {panel['title']!r} overlaps another"
        cells |= cell
        if panel["type"] == "row":
            assert not panel.get("targets"), panel["title"]
            continue
        assert panel["description"], f"panel {panel['title']!r}: say what it shows"
        assert panel["datasource"] == DS_REF, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            assert t["datasource"] == DS_REF and t["expr"].strip(), panel["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == DS_REF, v["name"]
    # Every variable a query uses is the dashboard's or Grafana's.
    texts = [t["expr"] for _, t in queried(d)] + [
        v["query"] for v in variables.values() if v["type"] == "query"]
    used = {m.group(1) or m.group(2) for text in texts for m in VARIABLE.finditer(text)}
    assert used <= set(variables) | set(BUILTINS), used - set(variables) - set(BUILTINS)
    # Every name it reads exists: the exporter's catalog, the rules' records.
    if not os.access(EXPORTER, os.X_OK):
        pytest.fail(f"{EXPORTER} was not built: install prometheus-cpp-dev, configure again")
    catalog = set(re.findall(r"^(planc_\w+) ", subprocess.run(
        [EXPORTER, "--list-metrics"], capture_output=True, text=True, check=True).stdout, re.M))
    with open(RULES, encoding="utf-8") as f:
        records = set(re.findall(r"^\s*- record:\s*(\S+)", f.read(), re.M))
    for panel, t in queried(d):
        for name in re.findall(r"\bplanc[_:][\w:]*", t["expr"]):
            known = records if ":" in name else catalog
            assert name in known, f"panel {panel['title']!r} reads {name}, which nothing makes"


def test_every_dashboard_panel_shows_the_scenario(scenario):
    """Each query of the dashboard, its variables filled in as Grafana fills
    them (a query variable's first value from Prometheus's label API),
    returns at least one series from this Prometheus: at the moment the
    scenario was complete (the test-sized windows hold it), and, for the
    market's and infusion's series, once planc.conf turns them on."""
    s = scenario
    c, p = s.c, s.p
    d = load_dashboard()
    values = dict(BUILTINS)
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", fill(v["query"], values))
            assert m, v["query"]
            r = p.get(f"/api/v1/label/{m.group(2)}/values", **{"match[]": m.group(1)})
            found = sorted(r["data"]) if r and r.get("status") == "success" else []
            assert found, f"variable {v['name']}: {v['query']} has no value"
            values[v["name"]] = found[0]
        elif v["type"] != "datasource":
            values[v["name"]] = v["current"]["value"]

    def empty(targets, at=None):
        """The targets whose query returns no series (with the API's error)."""
        out = []
        for panel, t in targets:
            params = {"query": fill(t["expr"], values)}
            if at:
                params["time"] = f"{at:.3f}"
            r = p.get("/api/v1/query", **params)
            if not r or r.get("status") != "success" or not r["data"]["result"]:
                out.append(f"{panel['title']} [{t['refId']}] {params['query']}: "
                           f"{(r or {}).get('error', 'no series')}")
        return out

    def all_have_data(targets, at=None):
        missing[:] = empty(targets, at)
        return not missing

    missing = []
    targets = queried(d)
    feature = [(panel, t) for panel, t in targets
               if any(f in t["expr"] for f in FEATURE_SERIES)]
    always = [pt for pt in targets if pt not in feature]
    assert len(always) >= 20 and len(feature) >= 5, (len(always), len(feature))
    try:
        c.wait_for("every panel's query to return data at the scenario's end",
                   lambda: all_have_data(always, s.shown_at), timeout=20)
    except AssertionError:
        pytest.fail("panels without data:\n  " + "\n  ".join(missing))
    # Market rounds every 2 s (the vacancy is known after the first) and a
    # pool whose idle window (1 h) cannot fill before the module ends: its
    # counters and replica count, and no replica submitted.  The module's
    # teardown cancels the jobs and puts planc.conf back.
    pool = (f"Pool=dash Tier=P3 Account=acct-api User=pcpool "
            f"Script={os.path.join(ROOT, 'etc', 'pools', 'serve.sh')} GpusPerReplica=4 "
            f"MinReplicas=0 MaxReplicas=1 Output=/dev/null")
    c.reload_planc_conf(SHORT_CLOCKS + ["Market=yes", "MarketInterval=2s", "Infusion=yes",
                                        "InfusionWindow=1h", pool])
    try:
        c.wait_for("the market's and infusion's panels to show data",
                   lambda: all_have_data(feature), timeout=30)
    except AssertionError:
        pytest.fail("panels without data with Market=yes and Infusion=yes:\n  "
                    + "\n  ".join(missing))
