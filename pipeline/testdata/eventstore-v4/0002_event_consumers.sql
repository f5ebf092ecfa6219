-- Consumer state of the async event dispatcher: one row per consumer shard,
-- (name, '__shared__') for shared delivery or (name, <instance id>) for
-- per-instance delivery.
CREATE TABLE {{schema}}.kumiko_event_consumers (
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
