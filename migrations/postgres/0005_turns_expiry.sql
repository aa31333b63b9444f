-- Retention rules that span namespaces (the global rule, and every
-- namespace but those with rules of their own): the turns of one status
-- last written before a time, whatever their namespace. Like turns_updated
-- it holds the minute of the last write, which moves at most once a minute
-- per turn, so appends keep updating the summary row in place; the query
-- bounds the minute and checks last_ts_ns on the rows it finds.
CREATE INDEX turns_expiry ON turns (terminal, updated_minute);
