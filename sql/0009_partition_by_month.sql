-- Plan C billing schema, version 9: planc.bill, planc.market_round and
-- planc.market_bid partitioned by month (PostgreSQL's declarative range
-- partitioning), so a table of hundreds of millions of bills stays quick
-- to read where a query names its months, and an old month can be
-- detached and archived whole (sql/README.md, "Retention").
--
--   planc.bill          by start_time (the key is (cluster, job_id,
--                       start_time): a partitioned table's unique key must
--                       hold its partition column, and start_time is
--                       already the key's, so exactly-once is unchanged)
--   planc.market_round  by round_at (its key holds it)
--   planc.market_bid    by round_at (its key and its reference to the
--                       round hold it)
-- Months are calendar months in UTC: planc.bill_2026_12 holds the runs
-- that started from 2026-12-01 00:00 UTC up to 2027-01-01 00:00 UTC.  Each
-- table also has a default partition (planc.bill_default, ...), so a row
-- whose month has no partition yet is stored, never refused.
-- planc.ensure_months(ahead) makes the month partitions from last month
-- to `ahead` months from now, moving any rows the default partitions hold
-- for them; jobcomp/planc's bill writer calls it when it connects and once
-- a day (its role, planc_writer, may execute it), and this migration makes
-- every month its rows need plus three ahead.
--
-- The rows are moved, not copied: the migration takes the tables' locks
-- for its whole transaction (bills wait in jobcomp/planc's spool
-- meanwhile, and are stored when it commits).  It writes every row once
-- more, with its indexes (docs/bench/ has the time it took at each size).
-- Row-level security, the grants, the hourly totals
-- (planc.usage_hourly is not partitioned and is not touched) and every
-- function that reads these tables by name are as before.

SET LOCAL TimeZone = 'UTC';

-- --- planc.bill --------------------------------------------------------------

ALTER TABLE planc.bill RENAME TO bill_unpartitioned;
ALTER INDEX planc.bill_pkey RENAME TO bill_unpartitioned_pkey;
ALTER INDEX planc.bill_end_idx RENAME TO bill_unpartitioned_end_idx;
ALTER INDEX planc.bill_user_idx RENAME TO bill_unpartitioned_user_idx;
ALTER INDEX planc.bill_account_idx RENAME TO bill_unpartitioned_account_idx;
ALTER INDEX planc.bill_unmeasured_idx RENAME TO bill_unpartitioned_unmeasured_idx;

-- Columns, defaults, NOT NULL, CHECK constraints (their names kept) and the
-- columns' comments as the migrations before made them.
CREATE TABLE planc.bill (
  LIKE planc.bill_unpartitioned
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING COMMENTS
    INCLUDING STORAGE,
  PRIMARY KEY (cluster, job_id, start_time)
) PARTITION BY RANGE (start_time);
CREATE INDEX bill_end_idx ON planc.bill (end_time);
CREATE INDEX bill_user_idx ON planc.bill (user_name, end_time);
CREATE INDEX bill_account_idx ON planc.bill (account, end_time);
CREATE INDEX bill_unmeasured_idx ON planc.bill (end_time) WHERE measured_at IS NULL;
-- A job's bills (sacct -c -j, planc-bill list -j): the key leads with the
-- cluster, which neither names, so without these every bill was read
-- (bench-bills: sacct -c -j 0.2 s at a million bills, 0.5 s at three).
CREATE INDEX bill_job_idx ON planc.bill (job_id);
CREATE INDEX bill_array_job_idx ON planc.bill (array_job_id) WHERE array_job_id IS NOT NULL;
CREATE INDEX bill_het_job_idx ON planc.bill (het_job_id) WHERE het_job_id IS NOT NULL;
CREATE TABLE planc.bill_default PARTITION OF planc.bill DEFAULT;

-- --- the market's rounds and bids -------------------------------------------------

ALTER TABLE planc.market_bid RENAME TO market_bid_unpartitioned;
ALTER TABLE planc.market_round RENAME TO market_round_unpartitioned;
ALTER INDEX planc.market_bid_pkey RENAME TO market_bid_unpartitioned_pkey;
ALTER INDEX planc.market_bid_user RENAME TO market_bid_unpartitioned_user;
ALTER INDEX planc.market_round_pkey RENAME TO market_round_unpartitioned_pkey;

CREATE TABLE planc.market_round (
  LIKE planc.market_round_unpartitioned
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS INCLUDING STORAGE,
  PRIMARY KEY (cluster, round_at, gpu_type)
) PARTITION BY RANGE (round_at);
CREATE TABLE planc.market_round_default PARTITION OF planc.market_round DEFAULT;

CREATE TABLE planc.market_bid (
  LIKE planc.market_bid_unpartitioned
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS INCLUDING STORAGE,
  PRIMARY KEY (cluster, round_at, gpu_type, job_id),
  FOREIGN KEY (cluster, round_at, gpu_type) REFERENCES planc.market_round
) PARTITION BY RANGE (round_at);
CREATE INDEX market_bid_user ON planc.market_bid (user_name, round_at);
CREATE TABLE planc.market_bid_default PARTITION OF planc.market_bid DEFAULT;

-- --- month partitions ------------------------------------------------------------

-- Makes the month partitions of the three tables for the month holding
-- `p_month` (UTC) if they are missing, moving the rows their default
-- partitions hold for it (PostgreSQL refuses a new partition while the
-- default holds rows of its range).  Rounds before bids (a bid refers to
-- its round).  Returns the partitions it made.  Serialised by an advisory
-- lock, so two writers calling it at once do not both make a month.
CREATE FUNCTION planc.ensure_month(p_month timestamptz) RETURNS integer
  LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = pg_catalog, planc, pg_temp SET TimeZone = 'UTC' AS $$
DECLARE
  lo timestamptz := date_trunc('month', p_month);
  hi timestamptz := date_trunc('month', p_month) + interval '1 month';
  suffix text := to_char(date_trunc('month', p_month), 'YYYY_MM');
  t record;
  made integer := 0;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('planc.ensure_month'));
  -- Bids leave the default partition first and come back last.
  CREATE TEMP TABLE IF NOT EXISTS planc_moving_bid (LIKE planc.market_bid) ON COMMIT DROP;
  FOR t IN SELECT * FROM (VALUES (1, 'bill', 'start_time'), (2, 'market_round', 'round_at'),
                                 (3, 'market_bid', 'round_at')) v(ord, tbl, col) ORDER BY ord LOOP
    CONTINUE WHEN to_regclass(format('planc.%I', t.tbl || '_' || suffix)) IS NOT NULL;
    IF t.tbl = 'market_round' THEN
      EXECUTE format('WITH m AS (DELETE FROM planc.market_bid_default WHERE round_at >= $1 AND'
                     ' round_at < $2 RETURNING *) INSERT INTO planc_moving_bid SELECT * FROM m')
        USING lo, hi;
    END IF;
    EXECUTE format('CREATE TEMP TABLE planc_moving (LIKE planc.%I) ON COMMIT DROP', t.tbl);
    EXECUTE format('WITH m AS (DELETE FROM planc.%I WHERE %I >= $1 AND %I < $2 RETURNING *)'
                   ' INSERT INTO planc_moving SELECT * FROM m', t.tbl || '_default', t.col, t.col)
      USING lo, hi;
    EXECUTE format('CREATE TABLE planc.%I PARTITION OF planc.%I FOR VALUES FROM (%L) TO (%L)',
                   t.tbl || '_' || suffix, t.tbl, lo, hi);
    EXECUTE format('INSERT INTO planc.%I SELECT * FROM planc_moving', t.tbl);
    DROP TABLE planc_moving;
    made := made + 1;
  END LOOP;
  -- Bids of a month whose bid partition existed already, or was just made.
  INSERT INTO planc.market_bid SELECT * FROM planc_moving_bid;
  DROP TABLE planc_moving_bid;
  RETURN made;
END $$;

-- The month partitions from last month to `p_ahead` months from now.
CREATE FUNCTION planc.ensure_months(p_ahead integer DEFAULT 3) RETURNS integer
  LANGUAGE sql SECURITY DEFINER
  SET search_path = pg_catalog, planc, pg_temp SET TimeZone = 'UTC' AS $$
    SELECT coalesce(sum(planc.ensure_month(m)), 0)::integer
      FROM generate_series(date_trunc('month', now()) - interval '1 month',
                           date_trunc('month', now()) + make_interval(months => greatest(p_ahead, 0)),
                           interval '1 month') m
$$;
REVOKE ALL ON FUNCTION planc.ensure_month(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION planc.ensure_months(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION planc.ensure_months(integer) TO planc_writer, planc_admin;

-- Every month the rows need, then three ahead; then the rows.
SELECT planc.ensure_month(m)
  FROM (SELECT date_trunc('month', start_time) AS m FROM planc.bill_unpartitioned
        UNION SELECT date_trunc('month', round_at) FROM planc.market_round_unpartitioned) months;
SELECT planc.ensure_months(3);
INSERT INTO planc.bill SELECT * FROM planc.bill_unpartitioned;
INSERT INTO planc.market_round SELECT * FROM planc.market_round_unpartitioned;
INSERT INTO planc.market_bid SELECT * FROM planc.market_bid_unpartitioned;
DROP TABLE planc.market_bid_unpartitioned;
DROP TABLE planc.market_round_unpartitioned;
DROP TABLE planc.bill_unpartitioned;

-- --- who may read and write (as 0001, 0003 and 0006 had it) ----------------------
-- Through the parent only: a partition has no grant, so its rows are read
-- only through the parent's row-level security.

ALTER TABLE planc.bill ENABLE ROW LEVEL SECURITY;
ALTER TABLE planc.market_round ENABLE ROW LEVEL SECURITY;
ALTER TABLE planc.market_bid ENABLE ROW LEVEL SECURITY;
CREATE POLICY bill_read ON planc.bill FOR SELECT
  TO planc_reader, planc_admin USING (planc.may_read(user_name, account));
CREATE POLICY bill_write ON planc.bill FOR ALL
  TO planc_writer USING (true) WITH CHECK (true);
CREATE POLICY market_round_read ON planc.market_round FOR SELECT
  TO planc_reader, planc_admin USING (true);
CREATE POLICY market_round_write ON planc.market_round FOR ALL
  TO planc_writer USING (true) WITH CHECK (true);
CREATE POLICY market_bid_read ON planc.market_bid FOR SELECT
  TO planc_reader, planc_admin USING (planc.may_read(user_name, account));
CREATE POLICY market_bid_write ON planc.market_bid FOR ALL
  TO planc_writer USING (true) WITH CHECK (true);

GRANT SELECT ON planc.bill, planc.market_round, planc.market_bid TO planc_reader, planc_admin;
GRANT SELECT, INSERT ON planc.bill, planc.market_round, planc.market_bid TO planc_writer;
GRANT UPDATE (measured_at, used_cpu_seconds, max_rss_bytes, tres_usage_in_tot, gpu_util_percent)
  ON planc.bill TO planc_writer;
