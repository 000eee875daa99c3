-- Read-model documents are compressed with lz4 instead of pglz. The projector rewrites each
-- document it touches whole (a thread's history grows with the thread), and a document over
-- TOAST's ~2 KB threshold is compressed at every rewrite: pglz_compress was 11 % of Postgres's
-- CPU under the #35 agent load (docs/performance.md, "Postgres's share"). lz4 does the same job
-- at a fraction of the CPU. Only new values are written with it; stored ones stay readable. A
-- server built without lz4 (`--with-lz4`, in every Debian and PGDG build since 14) keeps pglz.
DO $$
BEGIN
  EXECUTE 'ALTER TABLE read_models ALTER COLUMN doc SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
  RAISE NOTICE 'lz4 is not available: read-model documents stay compressed with pglz';
END
$$;
