-- When a consumer shard started waiting at its current gap: set by the pass
-- that first holds committed events back behind an id an open transaction
-- may still commit, cleared once nothing is held back. NULL while not
-- waiting. Operators read it as the gap wait (see gap_writers for who holds
-- it).
ALTER TABLE {{schema}}.kumiko_event_consumers ADD COLUMN gap_since timestamptz;
