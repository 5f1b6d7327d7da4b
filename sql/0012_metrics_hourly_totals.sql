-- Plan C schema, version 12: how far the hourly totals are behind the
-- bills, for planc-exporter.  Applied by sql/planc-migrate after 0011.
-- Changes no table.
--
-- Since schema 11 jobcomp/planc's writer adds the bills' hours to
-- planc.usage_hourly after it has stored them, within seconds.  The
-- billed totals planc-exporter reports, `planc-bill report` and the
-- usage poll all read planc.usage_hourly, so while bills are stored but
-- their hours are not added (PostgreSQL refusing the hourly upsert, a
-- writer role that lost its rights on planc.rollup_state) those figures
-- stand still and nothing else says so: the spool is empty, every bill
-- is stored.
--
-- planc.metrics_rollup() returns
--   waiting     the bills stored and numbered above
--               planc.rollup_state.last_seq: not in the hourly totals yet
--   rolled_up   when bills were last added to them (Unix time)
-- which planc-exporter turns into planc_bills_waiting_for_hourly_totals
-- and planc_hourly_totals_updated_timestamp_seconds.
--
-- Cost: a count over the index of the numbered bills (bill_seq_idx) from
-- last_seq on; with the writer keeping up that is the last few seconds'
-- bills.  Stalled for a day at a million runs a day it counts a million
-- index entries (well under a second), within the exporter's 20 s
-- statement timeout.

CREATE FUNCTION planc.metrics_rollup()
  RETURNS TABLE (waiting bigint, rolled_up double precision)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
    SELECT (SELECT count(*) FROM planc.bill b WHERE b.seq > s.last_seq),
           extract(epoch FROM s.at)::double precision
      FROM planc.rollup_state s
$$;
COMMENT ON FUNCTION planc.metrics_rollup() IS
  'planc-exporter: bills stored but not yet in planc.usage_hourly, and when bills were last added to it';

REVOKE ALL ON FUNCTION planc.metrics_rollup() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION planc.metrics_rollup() TO planc_metrics;
