-- Plan C billing schema, version 1.  Applied by sql/planc-migrate (see
-- sql/README.md) as a PostgreSQL superuser, in one transaction.
--
-- planc.bill        one row per run segment of a job (jobcomp/planc)
-- planc.usage_hourly hour x cluster x account x user x tier totals, kept in
--                   step with planc.bill in the same transaction
-- Money: amount_minor is an integer in minor units (1/100 of `currency`).

CREATE SCHEMA IF NOT EXISTS planc;

-- Group roles.  Login roles are made members by `planc-bill grant`:
--   planc_writer  slurmctld's role (JobCompLoc connects as it): inserts bills
--   planc_reader  every Slurm user: reads their own bills (and, as an account
--                 coordinator, their accounts' bills)
--   planc_admin   reads every bill
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'planc_writer') THEN
    CREATE ROLE planc_writer NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'planc_reader') THEN
    CREATE ROLE planc_reader NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'planc_admin') THEN
    CREATE ROLE planc_admin NOLOGIN;
  END IF;
END $$;

-- The idempotency key is (cluster, job_id, start_time): a job id is unique
-- within a cluster among jobs alive at one time, and one job cannot start
-- two runs in the same second, so the triple names one run segment even
-- after job ids wrap or the id counter is reset (a reused id has a later
-- start).  Replaying the spool after a crash writes the same triple again
-- and is dropped by ON CONFLICT DO NOTHING.
CREATE TABLE planc.bill (
  cluster            text        NOT NULL,
  job_id             bigint      NOT NULL,
  start_time         timestamptz NOT NULL,
  end_time           timestamptz NOT NULL,
  segment            integer     NOT NULL,   -- 0 first run, +1 per requeue
  array_job_id       bigint,
  array_task_id      bigint,
  het_job_id         bigint,
  het_job_offset     integer,
  submit_time        timestamptz,
  uid                bigint      NOT NULL,
  user_name          text        NOT NULL,
  account            text        NOT NULL,
  tier               text        NOT NULL,   -- P0..P3, '' if the QoS is no tier
  qos                text        NOT NULL,
  partition          text        NOT NULL,
  nodes              text        NOT NULL,
  node_count         integer     NOT NULL,
  state              text        NOT NULL,   -- COMPLETED, PREEMPTED, ...
  exit_code          integer     NOT NULL,
  job_name           text        NOT NULL,
  tres_req           text        NOT NULL,
  tres_alloc         text        NOT NULL,
  cpus               integer     NOT NULL,
  mem_mib            bigint      NOT NULL,
  gpu_cards          numeric(20,6) NOT NULL,
  gpu_detail         text        NOT NULL,
  billable_seconds   bigint      NOT NULL,
  card_seconds       numeric(30,6) NOT NULL,
  core_seconds       bigint      NOT NULL,
  mem_gib_seconds    numeric(30,10) NOT NULL,
  currency           text        NOT NULL,
  card_hour_price    numeric(20,6),          -- NULL when GPU types are mixed
  core_hour_price    numeric(20,6) NOT NULL,
  mem_gib_hour_price numeric(20,6) NOT NULL,
  tier_factor        numeric(6,3)  NOT NULL,
  amount_minor       bigint      NOT NULL CHECK (amount_minor >= 0),
  zero_reason        text        NOT NULL,   -- '' unless free by rule
  note               text        NOT NULL,
  admin_comment      text        NOT NULL,
  source             text        NOT NULL,   -- jobcomp | reconcile
  recorded_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (cluster, job_id, start_time)
);
CREATE INDEX bill_end_idx ON planc.bill (end_time);
CREATE INDEX bill_user_idx ON planc.bill (user_name, end_time);
CREATE INDEX bill_account_idx ON planc.bill (account, end_time);

CREATE TABLE planc.usage_hourly (
  hour            timestamptz NOT NULL,
  cluster         text        NOT NULL,
  account         text        NOT NULL,
  user_name       text        NOT NULL,
  tier            text        NOT NULL,
  card_seconds    numeric(30,6)  NOT NULL,
  core_seconds    bigint      NOT NULL,
  mem_gib_seconds numeric(30,10) NOT NULL,
  amount_minor    bigint      NOT NULL,
  segments        integer     NOT NULL,
  PRIMARY KEY (hour, cluster, account, user_name, tier)
);

-- Account coordinators (from slurmdbd, kept by `planc-bill grant`).
CREATE TABLE planc.account_coordinator (
  account   text NOT NULL,
  user_name text NOT NULL,
  PRIMARY KEY (account, user_name)
);

-- Who sees what is decided here, not in client code.
ALTER TABLE planc.bill ENABLE ROW LEVEL SECURITY;
ALTER TABLE planc.usage_hourly ENABLE ROW LEVEL SECURITY;

CREATE FUNCTION planc.may_read(p_user text, p_account text) RETURNS boolean
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
    SELECT p_user = session_user
        OR pg_has_role(session_user, 'planc_admin', 'MEMBER')
        OR EXISTS (SELECT 1 FROM planc.account_coordinator c
                    WHERE c.account = p_account AND c.user_name = session_user)
$$;
REVOKE ALL ON FUNCTION planc.may_read(text, text) FROM PUBLIC;

CREATE POLICY bill_read ON planc.bill FOR SELECT
  TO planc_reader, planc_admin USING (planc.may_read(user_name, account));
CREATE POLICY bill_write ON planc.bill FOR ALL
  TO planc_writer USING (true) WITH CHECK (true);
CREATE POLICY usage_read ON planc.usage_hourly FOR SELECT
  TO planc_reader, planc_admin USING (planc.may_read(user_name, account));
CREATE POLICY usage_write ON planc.usage_hourly FOR ALL
  TO planc_writer USING (true) WITH CHECK (true);

GRANT USAGE ON SCHEMA planc TO planc_writer, planc_reader, planc_admin;
GRANT SELECT ON planc.bill, planc.usage_hourly TO planc_reader, planc_admin;
GRANT SELECT, INSERT ON planc.bill TO planc_writer;
GRANT SELECT, INSERT, UPDATE ON planc.usage_hourly TO planc_writer;
GRANT EXECUTE ON FUNCTION planc.may_read(text, text) TO planc_reader, planc_admin;
GRANT SELECT ON planc.account_coordinator TO planc_admin;

-- Login roles for Slurm users, made by `planc-bill sync-roles` (run by an
-- admin; identifiers are quoted with format('%I'), values are parameters).
CREATE FUNCTION planc.ensure_member(p_role text, p_group text) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF p_group NOT IN ('planc_reader', 'planc_admin', 'planc_writer') THEN
    RAISE EXCEPTION 'unknown Plan C group %', p_group;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = p_role) THEN
    EXECUTE format('CREATE ROLE %I LOGIN', p_role);
  END IF;
  EXECUTE format('GRANT %I TO %I', p_group, p_role);
  -- The writer COPYs bills in batches, which PostgreSQL refuses on tables
  -- with row-level security unless the role bypasses it; it still has only
  -- INSERT and SELECT on the bills (no UPDATE, no DELETE).
  IF p_group = 'planc_writer' THEN
    EXECUTE format('ALTER ROLE %I BYPASSRLS', p_role);
  END IF;
END $$;
REVOKE ALL ON FUNCTION planc.ensure_member(text, text) FROM PUBLIC;

-- Replaces the coordinator list with pairs (accounts[i], users[i]).
CREATE FUNCTION planc.set_coordinators(p_accounts text[], p_users text[]) RETURNS void
  LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
  DELETE FROM planc.account_coordinator;
  INSERT INTO planc.account_coordinator (account, user_name)
    SELECT DISTINCT a, u FROM unnest(p_accounts, p_users) AS t(a, u);
$$;
REVOKE ALL ON FUNCTION planc.set_coordinators(text[], text[]) FROM PUBLIC;
