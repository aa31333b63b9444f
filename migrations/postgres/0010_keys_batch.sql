-- A batch of Begins and Completes on distinct keys in one statement, so one
-- round trip and one commit: the keys' advisory locks in one sorted order
-- (the lock every writer of a record takes), then each request planned and
-- written by the rules of src/domain/keys.rs (`plan_begin`, `acquired`,
-- `plan_complete`), which this function follows case by case. It is
-- VOLATILE, so each query below reads with a snapshot taken after the
-- locks: it sees what the batch it waited for committed. Each record is
-- read by a probe of the primary key (a lateral subquery that cannot be
-- flattened, whatever plan the statistics of the moment suggest) and
-- written by an upsert, which finds its row through the same index.
--
-- One row per request: `kind` 0 for a Begin, 1 for a Complete; `idx` its
-- place among its kind (from 1); `code` 0 when it acquired (a Begin) or
-- recorded its result (a Complete), 1 completed, 2 in progress, 3 failed,
-- 10 key reused, 11 lease lost, 12 not acquired, 13 result mismatch.
-- `at_ns` is the lease's expiry for a Begin, the recording time for a
-- Complete; `payload` the result or the error a Begin answers with.
CREATE FUNCTION stepwell_keys_batch(
    b_ns TEXT[], b_key TEXT[], b_fp BYTEA[], b_lease BIGINT[], b_retention BIGINT[],
    c_ns TEXT[], c_key TEXT[], c_token BIGINT[], c_result BYTEA[], clock_offset BIGINT)
RETURNS TABLE (kind INT, idx BIGINT, code INT, attempt BIGINT, lease_token BIGINT, at_ns BIGINT,
               previous_lease_expired BOOLEAN, payload BYTEA)
LANGUAGE plpgsql VOLATILE
-- Its queries' plans are kept, never made again per call: every read is an
-- index probe whatever the arrays hold, and a plan made per call (the
-- first calls' default) cost more than the whole rest of the call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    now_ns BIGINT;
BEGIN
    PERFORM pg_advisory_xact_lock(h) FROM (
        SELECT DISTINCT hashtextextended(n || '/' || k, 0) AS h
        FROM UNNEST(b_ns || c_ns, b_key || c_key) AS u(n, k)
        ORDER BY h) sorted;
    now_ns := (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT * 1000 + clock_offset;

    -- Complete: the current token of a leased record takes the result; a
    -- repeat with the same result answers when it was recorded. A record
    -- past its retention counts as absent.
    RETURN QUERY
    WITH args AS (
        SELECT * FROM UNNEST(c_ns, c_key, c_token, c_result) WITH ORDINALITY AS a(n, k, t, r, i)),
    cur AS (
        SELECT a.i, a.n, a.k, a.t, a.r, x.*
        FROM args a LEFT JOIN LATERAL (
            SELECT * FROM idempotency r
            WHERE r.namespace = a.n AND r.key = a.k AND r.purge_after_ns > now_ns OFFSET 0) x ON true),
    done AS (
        INSERT INTO idempotency AS x (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns,
                                      result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns)
        SELECT c.n, c.k, 2, c.fingerprint, c.attempt, c.lease_token, c.lease_expires_at_ns, c.r, c.error,
               c.retention_ns, c.created_at_ns, now_ns, now_ns + c.retention_ns
        FROM cur c WHERE c.held = 1 AND c.lease_token = c.t
        ON CONFLICT (namespace, key) DO UPDATE SET
          held = excluded.held, result = excluded.result, updated_at_ns = excluded.updated_at_ns,
          purge_after_ns = excluded.purge_after_ns
        RETURNING x.key)
    SELECT 1, c.i,
           CASE WHEN c.held IS NULL THEN 12
                WHEN c.lease_token <> c.t THEN 11
                WHEN c.held = 1 THEN 0
                WHEN c.held = 2 AND c.result = c.r THEN 0
                WHEN c.held = 2 THEN 13
                ELSE 12 END,
           0::BIGINT, 0::BIGINT,
           CASE WHEN c.held = 1 THEN now_ns ELSE coalesce(c.updated_at_ns, 0) END,
           false, NULL::BYTEA
    FROM cur c;

    -- Begin: an absent, released or expired record is acquired with a new
    -- token from the store-wide sequence, drawn in the batch's order; a live
    -- lease, a result or a failure is answered; a different fingerprint,
    -- when both are given, is refused.
    RETURN QUERY
    WITH args AS (
        SELECT * FROM UNNEST(b_ns, b_key, b_fp, b_lease, b_retention) WITH ORDINALITY AS a(n, k, f, l, ret, i)),
    cur AS (
        SELECT a.*, x.held, x.fingerprint AS fp, x.attempt AS att, x.lease_expires_at_ns AS expires,
               x.result AS res, x.error AS err, x.created_at_ns AS created,
               CASE WHEN x.held IS NULL THEN 0
                    WHEN octet_length(a.f) > 0 AND octet_length(x.fingerprint) > 0 AND a.f <> x.fingerprint THEN 10
                    WHEN x.held = 1 AND now_ns < x.lease_expires_at_ns THEN 2
                    WHEN x.held = 2 THEN 1
                    WHEN x.held = 3 THEN 3
                    ELSE 0 END AS code
        FROM args a LEFT JOIN LATERAL (
            SELECT * FROM idempotency r
            WHERE r.namespace = a.n AND r.key = a.k AND r.purge_after_ns > now_ns OFFSET 0) x ON true),
    acquiring AS MATERIALIZED (
        SELECT s.i, nextval('lease_tokens') AS token
        FROM (SELECT i FROM cur WHERE code = 0 ORDER BY i) s),
    saved AS (
        INSERT INTO idempotency AS x (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns,
                                      result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns)
        SELECT c.n, c.k, 1, CASE WHEN c.held IS NOT NULL AND octet_length(c.f) = 0 THEN c.fp ELSE c.f END,
               coalesce(c.att + 1, 1), q.token, now_ns + c.l, ''::BYTEA, ''::BYTEA, c.ret,
               coalesce(c.created, now_ns), now_ns, now_ns + c.l + c.ret
        FROM cur c JOIN acquiring q ON q.i = c.i
        ON CONFLICT (namespace, key) DO UPDATE SET
          held = excluded.held, fingerprint = excluded.fingerprint, attempt = excluded.attempt,
          lease_token = excluded.lease_token, lease_expires_at_ns = excluded.lease_expires_at_ns,
          result = excluded.result, error = excluded.error, retention_ns = excluded.retention_ns,
          created_at_ns = excluded.created_at_ns, updated_at_ns = excluded.updated_at_ns,
          purge_after_ns = excluded.purge_after_ns
        RETURNING x.key)
    SELECT 0, c.i, c.code,
           CASE WHEN c.code = 0 THEN coalesce(c.att + 1, 1) ELSE c.att END,
           coalesce(q.token, 0),
           CASE WHEN c.code = 0 THEN now_ns + c.l ELSE c.expires END,
           c.code = 0 AND c.held IS NOT DISTINCT FROM 1,
           CASE WHEN c.code = 1 THEN c.res WHEN c.code = 3 THEN c.err END
    FROM cur c LEFT JOIN acquiring q ON q.i = c.i;
END
$$;
