-- Plan C schema, version 5: the spot market's "expected interruption"
-- (policy 000, section 5; issue 15), which `planc-bill market` shows every
-- user.  Applied by sql/planc-migrate after 0004.  Changes no table.
--
-- One function, run with its owner's rights (SECURITY DEFINER: row-level
-- security would otherwise leave a user only their own runs), that returns
-- aggregates over every P2 run segment that ended in the last p_hours
-- hours: how many, how many were preempted, and their mean length.  No
-- bill, user, account or job name leaves it.  Every Slurm user
-- (planc_reader) and admin may call it.

CREATE OR REPLACE FUNCTION planc.p2_runs(p_hours integer)
  RETURNS TABLE (runs bigint, preempted bigint, mean_run_seconds double precision)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
    SELECT count(*),
           count(*) FILTER (WHERE b.state = 'PREEMPTED'),
           avg(extract(epoch FROM (b.end_time - b.start_time)))::double precision
      FROM planc.bill b
     WHERE b.tier = 'P2'
       AND b.end_time > now() - make_interval(hours => greatest(1, least(p_hours, 24 * 366)))
       AND b.end_time > b.start_time
$$;

REVOKE ALL ON FUNCTION planc.p2_runs(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION planc.p2_runs(integer) TO planc_reader, planc_admin;
