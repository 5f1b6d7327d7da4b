-- Plan C schema, version 4: what planc-exporter reads of the bills.
-- Applied by sql/planc-migrate after 0003.  Changes no table.
--
-- The exporter gets totals, never a bill: two functions, run with their
-- owner's rights (SECURITY DEFINER, so row-level security does not hide
-- other users' rows from the sums), which only the group planc_metrics may
-- call.  `planc-bill sync-roles --metrics ROLE` puts the exporter's login
-- role in it.  A member sees per account and tier what was billed, which
-- is what an admin's Prometheus shows; it cannot read a bill, a user's
-- usage or a job name.
--
-- Cost: metrics_billed() sums planc.usage_hourly (one row per hour x
-- account x user x tier), not the bills; metrics_bills() reads the
-- end-time index and the partial index of unmeasured bills.

DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'planc_metrics') THEN
    CREATE ROLE planc_metrics NOLOGIN;
  END IF;
END $$;

-- Billed usage per cluster, account and tier ('' when the QoS is no tier),
-- all time: card-seconds, core-seconds, memory GiB-seconds and the amount
-- in micro-units of the bills' currency.
CREATE OR REPLACE FUNCTION planc.metrics_billed()
  RETURNS TABLE (cluster text, account text, tier text, card_seconds numeric,
                 core_seconds numeric, mem_gib_seconds numeric, amount_micros numeric)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
    SELECT u.cluster, u.account, u.tier, sum(u.card_seconds), sum(u.core_seconds)::numeric,
           sum(u.mem_gib_seconds), sum(u.amount_micros)::numeric
      FROM planc.usage_hourly u
     GROUP BY u.cluster, u.account, u.tier
$$;

-- The newest bill's end (epoch seconds, NULL when there is no bill) and the
-- bills of the last 7 days that planc-bill measure has not measured yet.
CREATE OR REPLACE FUNCTION planc.metrics_bills()
  RETURNS TABLE (newest_end double precision, unmeasured_7d bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
    SELECT extract(epoch FROM (SELECT max(b.end_time) FROM planc.bill b))::double precision,
           (SELECT count(*) FROM planc.bill b
             WHERE b.measured_at IS NULL AND b.end_time > now() - interval '7 days')
$$;

REVOKE ALL ON FUNCTION planc.metrics_billed() FROM PUBLIC;
REVOKE ALL ON FUNCTION planc.metrics_bills() FROM PUBLIC;
GRANT USAGE ON SCHEMA planc TO planc_metrics;
GRANT EXECUTE ON FUNCTION planc.metrics_billed(), planc.metrics_bills() TO planc_metrics;

-- `planc-bill sync-roles --metrics ROLE` makes ROLE a member.
CREATE OR REPLACE FUNCTION planc.ensure_member(p_role text, p_group text) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF p_group NOT IN ('planc_reader', 'planc_admin', 'planc_writer', 'planc_metrics') THEN
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
