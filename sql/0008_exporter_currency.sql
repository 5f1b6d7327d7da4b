-- Plan C schema, version 8: the currency of the billed amounts
-- planc-exporter reads.  Applied by sql/planc-migrate after 0007.  Changes
-- no table.
--
-- planc.metrics_billed() (0004) returned amounts without saying in which
-- currency.  It now also returns `currency`: the currency of the cluster's
-- newest bill (planc.conf's Currency when that bill was priced), which
-- planc-exporter puts on planc_billed_amount_total as a label.  The hourly
-- totals do not keep currencies apart (nor does planc-bill report): after a
-- change of Currency a cluster's all-time totals mix both, labelled with the
-- new one.
--
-- A function's result columns cannot be changed in place, so it is dropped
-- and made again with the same rights.  The old columns keep their names
-- and order: an exporter of the previous release, which names them, reads
-- the new function unchanged.
--
-- Cost: the totals are summed from planc.usage_hourly as before; the
-- currency is one backward step per cluster on the end-time index.

DROP FUNCTION IF EXISTS planc.metrics_billed();

CREATE FUNCTION planc.metrics_billed()
  RETURNS TABLE (cluster text, account text, tier text, card_seconds numeric,
                 core_seconds numeric, mem_gib_seconds numeric, amount_micros numeric,
                 currency text)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
    WITH totals AS (
      SELECT u.cluster, u.account, u.tier, sum(u.card_seconds) AS card_seconds,
             sum(u.core_seconds)::numeric AS core_seconds,
             sum(u.mem_gib_seconds) AS mem_gib_seconds,
             sum(u.amount_micros)::numeric AS amount_micros
        FROM planc.usage_hourly u
       GROUP BY u.cluster, u.account, u.tier
    ), currencies AS (
      SELECT c.cluster,
             (SELECT b.currency FROM planc.bill b
               WHERE b.cluster = c.cluster
               ORDER BY b.end_time DESC LIMIT 1) AS currency
        FROM (SELECT DISTINCT t.cluster FROM totals t) c
    )
    SELECT t.cluster, t.account, t.tier, t.card_seconds, t.core_seconds, t.mem_gib_seconds,
           t.amount_micros, coalesce(k.currency, '')
      FROM totals t LEFT JOIN currencies k ON k.cluster = t.cluster
$$;

REVOKE ALL ON FUNCTION planc.metrics_billed() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION planc.metrics_billed() TO planc_metrics;
