-- The inbox: one row per integration message and handler that handled it,
-- written in the handler's transaction, so a redelivered message skips the
-- handlers whose writes committed.
CREATE TABLE IF NOT EXISTS {{schema}}.kumiko_inbox (
    message_id uuid        NOT NULL,
    handler    text        NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, handler)
);

-- Dead messages of the in-process transport: a handler that failed every
-- attempt, with the message and the last error, for ops to list, retry or
-- drop. (Over RabbitMQ they wait in the broker's <queue>.dead instead.)
CREATE TABLE IF NOT EXISTS {{schema}}.kumiko_integration_dead (
    message_id uuid        NOT NULL,
    handler    text        NOT NULL,
    type       text        NOT NULL,
    tenant_id  uuid        NOT NULL,
    message    jsonb       NOT NULL,
    attempts   integer     NOT NULL,
    last_error text        NOT NULL,
    dead_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, handler)
);
