-- Personal data (docs/personal-data.md). Each data subject of a tenant has
-- one data key, stored wrapped by a key-encryption key the database never
-- holds (kek_id names it). Deleting a subject's row forgets the subject:
-- its sealed values in events and snapshots can no longer be opened.
CREATE TABLE {{schema}}.kumiko_subject_keys (
    tenant_id  uuid        NOT NULL,
    subject    text        NOT NULL,
    kek_id     text        NOT NULL,
    wrapped    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, subject)
);
CREATE INDEX kumiko_subject_keys_kek ON {{schema}}.kumiko_subject_keys (kek_id);

-- One row per key-encryption key in use: a data key wrapped by it, opened
-- at every start, so that a wrong or missing key fails the start instead
-- of a read.
CREATE TABLE {{schema}}.kumiko_key_checks (
    kek_id     text        PRIMARY KEY,
    wrapped    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Which fields of an event or snapshot are sealed, and whose: field name →
-- subject. NULL when none.
ALTER TABLE {{schema}}.kumiko_events ADD COLUMN personal jsonb;
ALTER TABLE {{schema}}.kumiko_snapshots ADD COLUMN personal jsonb;

-- The wrapped keys of the subjects a row's sealed fields belong to, in the
-- reading statement's snapshot: subject → [kek id, base64 of the wrapped
-- key]. A forgotten subject is missing.
CREATE FUNCTION {{schema}}.kumiko_subject_keys_of(tenant uuid, personal jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_object_agg(k.subject, jsonb_build_array(k.kek_id, encode(k.wrapped, 'base64')))
    FROM {{schema}}.kumiko_subject_keys k
    WHERE k.tenant_id = tenant AND k.subject IN (SELECT value FROM jsonb_each_text(personal))
$$;

-- The subjects of a row's sealed fields, and an index of the events by
-- them: a subject's export finds its events without reading the others.
CREATE FUNCTION {{schema}}.kumiko_subjects_of(personal jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg(DISTINCT value) FROM jsonb_each_text(personal)
$$;
CREATE INDEX kumiko_events_subjects ON {{schema}}.kumiko_events
    USING gin ({{schema}}.kumiko_subjects_of(personal)) WHERE personal IS NOT NULL;
