-- Liveness of the processes running a dispatcher: one row per instance id,
-- refreshed on a fixed beat (heartbeat). An instance whose last beat is older
-- than GREATEST(stale_after, 3 * heartbeat) is stale: its per-instance
-- consumer rows may be removed (consumer gc).
CREATE TABLE {{schema}}.kumiko_instances (
    instance_id text        PRIMARY KEY,
    host        text        NOT NULL DEFAULT '',
    version     text        NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    heartbeat   interval    NOT NULL,
    stale_after interval    NOT NULL
);

-- A shard whose cursor lies before events of its types that a prune removed
-- is expired: it delivers nothing until an operator skips it (resuming with
-- the oldest retained event) or rebuilds its projection. expired_up_to is
-- the highest pruned id that expired it (0 when not expired); pruned_ack the
-- highest pruned id the shard has accepted (by skip, rebuild, or being
-- registered after that prune).
ALTER TABLE {{schema}}.kumiko_event_consumers
    DROP CONSTRAINT IF EXISTS kumiko_event_consumers_status_check,
    ADD CONSTRAINT kumiko_event_consumers_status_check CHECK (status IN ('idle', 'dead', 'disabled', 'expired')),
    ADD COLUMN expired_up_to bigint NOT NULL DEFAULT 0,
    ADD COLUMN pruned_ack    bigint NOT NULL DEFAULT 0;
