-- The counter row fencing tokens are drawn from in the portable profile
-- (--postgres-profile portable), where a distributed engine would cache a
-- sequence's values per connection. It starts where the sequence stands,
-- and each sidecar aligns the two at start-up, so tokens keep increasing
-- when a store moves between the profiles.
CREATE TABLE stepwell_counters (
    name text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO stepwell_counters (name, value) SELECT 'lease_tokens', last_value FROM lease_tokens;
