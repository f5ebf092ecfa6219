-- Idempotency keys of keyed writes, recorded in the write transaction per
-- (tenant, user): a second write with a key is refused even when the HTTP
-- layer's record of the first was lost. The index serves
-- Executor.PruneIdempotencyKeys.
--
-- Databases set up before this migration got the table from
-- Executor.EnsureSchema: IF NOT EXISTS keeps it as it is.
CREATE TABLE IF NOT EXISTS {{schema}}.kumiko_idempotency_keys (
    tenant_id    uuid        NOT NULL,
    user_id      text        NOT NULL,
    key          text        NOT NULL,
    request_hash text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id, key)
);
CREATE INDEX IF NOT EXISTS kumiko_idempotency_keys_created_at ON {{schema}}.kumiko_idempotency_keys (created_at);
