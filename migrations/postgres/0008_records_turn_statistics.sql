-- No planner statistics on records.turn_id. Every statement that names a
-- turn fixes a prefix of the primary key (namespace, turn_id, kind, scope,
-- id), which serves it best. Statistics gathered while the table held few
-- turns made the planner scan records_by_id (namespace, kind, id) backwards
-- instead, reading every newer record of the kind in the namespace to find
-- one turn's newest (an agent session's get_items read 12,000 rows to return
-- 20). Without them the planner takes a turn to hold few of the rows, which
-- is what a store of many threads and sessions looks like.
ALTER TABLE records ALTER COLUMN turn_id SET STATISTICS 0;
