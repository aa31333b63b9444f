-- ListTurns by status, the question a recovering service asks
-- (ListTurns(OPEN)): the turns of one status in turn_id order, so a page
-- reads its own rows and not the whole namespace.
CREATE INDEX turns_status ON turns (namespace, terminal, turn_id);

-- ListTurns by updated_before: the turns last written before a time.
CREATE INDEX turns_updated ON turns (namespace, last_ts_ns);
