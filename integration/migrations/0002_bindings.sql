-- The contracts an app's queue is bound to on the broker, as its last start
-- bound them: the next start unbinds what the app no longer handles, so the
-- queue stays bound to exactly the handled contracts.
CREATE TABLE IF NOT EXISTS {{schema}}.kumiko_integration_bindings (
    queue    text NOT NULL,
    exchange text NOT NULL,
    type     text NOT NULL,
    PRIMARY KEY (queue, exchange, type)
);
