-- Consumer state of the async event dispatcher: one row per consumer shard,
-- (name, '__shared__') for shared delivery or (name, <instance id>) for
-- per-instance delivery.
--
-- Databases migrated before the table moved here got it from the event
-- store's migrations 2 and 4: IF NOT EXISTS keeps it as it is, with the same
-- columns in the same order.
CREATE TABLE IF NOT EXISTS {{schema}}.kumiko_event_consumers (
    name                    text        NOT NULL,
    instance_id             text        NOT NULL,
    last_processed_event_id bigint      NOT NULL DEFAULT 0,
    status                  text        NOT NULL DEFAULT 'idle' CHECK (status IN ('idle', 'dead', 'disabled')),
    attempts                integer     NOT NULL DEFAULT 0,
    last_error              text        NOT NULL DEFAULT '',
    -- Gap bookkeeping: ids up to gap_horizon are settled once none of
    -- gap_writers (virtual transaction ids of in-flight event writers) runs.
    gap_horizon             bigint      NOT NULL DEFAULT 0,
    gap_writers             text[]      NOT NULL DEFAULT '{}',
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, instance_id)
);

-- When a consumer shard started waiting at its current gap: set by the pass
-- that first holds committed events back behind an id an open transaction
-- may still commit, cleared once nothing is held back. NULL while not
-- waiting. Operators read it as the gap wait (see gap_writers for who holds
-- it).
ALTER TABLE {{schema}}.kumiko_event_consumers ADD COLUMN IF NOT EXISTS gap_since timestamptz;
