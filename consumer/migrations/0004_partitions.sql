-- Partitioned consumers (Consumer.Partitions): one shard row per partition,
-- instance_id '__partition_<k>__', with its index (partition) and the
-- consumer's partition count (partitions) as the rows say — the rows, not the
-- code, decide after the first start; consumer repartition changes them.
-- partitions is 0 for the shared and per-instance shards.
ALTER TABLE {{schema}}.kumiko_event_consumers
    ADD COLUMN partition  integer NOT NULL DEFAULT 0,
    ADD COLUMN partitions integer NOT NULL DEFAULT 0,
    -- fence: while a repartition drains the partitions, none passes this id
    -- (0: no fence).
    ADD COLUMN fence      bigint  NOT NULL DEFAULT 0;

-- The processes running each shared consumer: the live ones share its
-- partitions (see consumer.Dispatcher). Only rows whose instance beats
-- count (joined with kumiko_instances); a row goes when its process stops
-- and when consumer gc removes its instance.
CREATE TABLE {{schema}}.kumiko_consumer_members (
    name        text NOT NULL,
    instance_id text NOT NULL,
    PRIMARY KEY (name, instance_id)
);
CREATE INDEX ON {{schema}}.kumiko_consumer_members (instance_id);

-- Parked streams of consumers with Park: an event that exhausted its
-- attempts parks its stream (the consumer's partition key, by default the
-- aggregate id) on its shard; the shard passes the stream's later events
-- over until an operator retries the stream (its events from the failing one,
-- in order) or skips the failing event (action, carried out by the shard's
-- next pass).
CREATE TABLE {{schema}}.kumiko_consumer_parked (
    name        text        NOT NULL,
    shard       text        NOT NULL,
    stream      text        NOT NULL,
    event_id    bigint      NOT NULL,
    event_type  text        NOT NULL,
    last_error  text        NOT NULL,
    attempts    integer     NOT NULL,
    since       timestamptz NOT NULL DEFAULT now(),
    action      text        NOT NULL DEFAULT '' CHECK (action IN ('', 'retry', 'skip')),
    PRIMARY KEY (name, shard, stream)
);

-- Who reset or repartitioned which consumer, when, and to where.
CREATE TABLE {{schema}}.kumiko_consumer_audit (
    id     bigserial   PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    name   text        NOT NULL,
    action text        NOT NULL,
    actor  text        NOT NULL,
    detail jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX ON {{schema}}.kumiko_consumer_audit (name, at);
