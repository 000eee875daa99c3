-- The write order as one function (store/src/postgres/mod.rs, `take_order!`): the advisory lock
-- that serializes batches across every process on the database (key 0x7468_7265_6164,
-- "thread"), then the highest committed id. It ran as two statements of a simple query, and
-- Postgres parsed and planned `MAX(id)` again for every batch (#35: planning was an eighth of
-- Postgres's CPU under the agent load, this the larger part). PL/pgSQL keeps the plan of its
-- statement for the session. The function is VOLATILE (the default), so under READ COMMITTED
-- its `SELECT` takes a snapshot of its own, after the lock is held: it sees every batch that
-- committed before.
CREATE FUNCTION threadstream_take_order() RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(127991944667492);
  RETURN COALESCE((SELECT MAX(id) FROM events), 0);
END
$$;
