-- The span of the request that settled a wait (a Signal or CancelWait), as
-- "<trace id>-<span id>" in hex, so that the span of an Await it wakes,
-- on any sidecar, links to it; NULL when that request was not traced, or
-- for a timer's or an expiry's settlement.
ALTER TABLE waits ADD COLUMN settled_span TEXT;
