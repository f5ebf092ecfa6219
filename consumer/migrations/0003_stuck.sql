-- Handlers running past their consumer's stuck threshold (StuckAfter), as the
-- process running them last recorded them: one row per shard whose pass has
-- a handler stuck. The pass's transaction holds the shard's row, so the
-- process records these on the liveness beat's own connection instead;
-- readers trust a row only while its process beats and the shard's cursor
-- has not passed event_id. A process replaces all its rows at once.
CREATE TABLE {{schema}}.kumiko_consumer_stuck (
    name           text        NOT NULL,
    shard_instance text        NOT NULL,
    instance_id    text        NOT NULL REFERENCES {{schema}}.kumiko_instances (instance_id) ON DELETE CASCADE,
    event_id       bigint      NOT NULL,
    since          timestamptz NOT NULL,
    PRIMARY KEY (name, shard_instance)
);
CREATE INDEX ON {{schema}}.kumiko_consumer_stuck (instance_id);
