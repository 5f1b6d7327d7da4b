-- Plan C billing schema, version 10: each user's longest run, so that a
-- query for the bills of a time window reads only the runs that can
-- overlap it.
--
-- A bill overlaps the window [S, E] when end_time >= S and start_time <= E.
-- The (user_name, end_time) index answers the first half, but without an
-- upper bound on end_time it reads every later bill of the user too: to
-- list one day three months ago it read three months of the user's bills
-- and dropped all but that day's.  A run that started by E ended by E plus
-- the longest run, so the window's query adds
--     end_time <= E + planc.longest_run(users)
-- and reads only the runs that ended inside [S, E + longest].
--
--   planc.bill_longest       one row per user: the longest run among the
--                            user's bills (end_time - start_time)
--   planc.note_longest()     kept up to date by a statement trigger on
--                            planc.bill: every insert, COPY included, by
--                            whatever role, raises a user's row when a new
--                            bill is longer (rows that do not grow are not
--                            written or locked)
--   planc.longest_run(text[])  the bound a query may use: the longest run
--                            of the named users when they are all the
--                            caller (or the caller is a planc_admin), the
--                            cluster-wide longest otherwise, so nobody
--                            learns another user's run lengths
--
-- The migration fills the table from the bills already stored: one read of
-- planc.bill, under the lock that keeps the writer out meanwhile (bills
-- wait in jobcomp/planc's spool and are stored when it commits).

SET LOCAL TimeZone = 'UTC';

CREATE TABLE planc.bill_longest (
  user_name text PRIMARY KEY,
  longest   interval NOT NULL
);
COMMENT ON TABLE planc.bill_longest IS
  'the longest run (end_time - start_time) among each user''s bills; kept by a trigger on planc.bill; read through planc.longest_run()';

LOCK TABLE planc.bill IN SHARE MODE;
INSERT INTO planc.bill_longest (user_name, longest)
  SELECT user_name, max(end_time - start_time) FROM planc.bill GROUP BY user_name;

CREATE FUNCTION planc.note_longest() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
BEGIN
  -- Only users whose longest grows: the common batch (runs shorter than
  -- the user's longest) writes and locks nothing.  Sorted, so two writers
  -- raising the same users lock them in one order.
  INSERT INTO planc.bill_longest AS l (user_name, longest)
    SELECT n.user_name, n.longest
      FROM (SELECT user_name, max(end_time - start_time) AS longest
              FROM inserted GROUP BY user_name) n
     WHERE NOT EXISTS (SELECT 1 FROM planc.bill_longest o
                        WHERE o.user_name = n.user_name AND o.longest >= n.longest)
     ORDER BY n.user_name
  ON CONFLICT (user_name) DO UPDATE SET longest = excluded.longest
    WHERE l.longest < excluded.longest;
  RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION planc.note_longest() FROM PUBLIC;

CREATE TRIGGER bill_longest_run AFTER INSERT ON planc.bill
  REFERENCING NEW TABLE AS inserted
  FOR EACH STATEMENT EXECUTE FUNCTION planc.note_longest();

CREATE FUNCTION planc.longest_run(p_users text[]) RETURNS interval
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, planc, pg_temp AS $$
    SELECT coalesce(max(l.longest), interval '0')
      FROM planc.bill_longest l
     WHERE CASE WHEN p_users IS NOT NULL AND cardinality(p_users) > 0
                     AND (p_users <@ ARRAY[session_user::text]
                          OR pg_has_role(session_user, 'planc_admin', 'MEMBER'))
                THEN l.user_name = ANY(p_users)
                ELSE true END
$$;
REVOKE ALL ON FUNCTION planc.longest_run(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION planc.longest_run(text[]) TO planc_reader, planc_admin, planc_writer;
