-- ListTurns by status, the question a recovering service asks
-- (ListTurns(OPEN)): the turns of one status in turn_id order, so a page
-- reads its own rows and not the whole namespace.
CREATE INDEX turns_status ON turns (namespace, terminal, turn_id);

-- ListTurns by updated_before: the turns last written before a time. The
-- index holds the minute of the last write, not its nanosecond: every
-- append moves last_ts_ns, and an index on it would stop Postgres from
-- updating the summary row in place (a heap-only update), costing each
-- append an index insertion. The minute changes at most once a minute per
-- turn; the query reads the index by minute and checks last_ts_ns on the
-- rows it finds.
ALTER TABLE turns ADD COLUMN updated_minute BIGINT
    GENERATED ALWAYS AS (last_ts_ns / 60000000000) STORED;
CREATE INDEX turns_updated ON turns (namespace, updated_minute);
