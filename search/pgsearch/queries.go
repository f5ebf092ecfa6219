package pgsearch

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The engine's tables, in its schema:
//
//   - kumiko_doc_indexes: one row per index, its definition and the
//     fingerprint of it that decides whether Ensure recreates the index's
//     table;
//   - kumiko_docs_<index>: an index's documents, a row per tenant and id,
//     a text column per searchable field (f_ and a hash of the field's
//     name), the filter values as a jsonb object, and the generated search
//     columns and indexes of internal/searchsql (kumiko_search_…).
//
// No name of the engine's own starts with kumiko_search_ (searchsql drops
// the objects of that prefix it does not keep), and none can be another's:
// index tables all start with kumiko_docs_ followed by a letter, their
// primary keys with kumiko_dpk_, and the registry is kumiko_doc_indexes.

// Relation names and prefixes.
const (
	registryTable = "kumiko_doc_indexes"
	tablePrefix   = "kumiko_docs_"
	pkPrefix      = "kumiko_dpk_"
)

// Statements on the schema and the registry. {schema} is the engine's
// schema, {registry} the registry table, both quoted.
const (
	// sqlLockSchema serialises the Ensures of the engines on one schema
	// (several processes start at once) until the transaction ends. $1 is
	// the lock's name.
	sqlLockSchema = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

	// sqlSchemaExists answers whether the schema $1 (unquoted) exists.
	sqlSchemaExists = `SELECT to_regnamespace($1::text) IS NOT NULL`

	sqlCreateSchema = `CREATE SCHEMA IF NOT EXISTS {schema}`

	sqlCreateRegistry = `CREATE TABLE IF NOT EXISTS {registry} (
	name text PRIMARY KEY,
	fingerprint text NOT NULL,
	definition jsonb NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
)`

	// sqlCheckConfig fails with 42704 (undefined_object) when $1 is not a
	// text search configuration of the database.
	sqlCheckConfig = `SELECT $1::text::regconfig::text`

	// sqlRegistered is the fingerprint of index $1 and whether its table
	// ($2, quoted) exists.
	sqlRegistered = `SELECT fingerprint, to_regclass($2::text) IS NOT NULL FROM {registry} WHERE name = $1`

	// sqlRegister records the definition $3 (JSON) of index $1 and its
	// fingerprint $2.
	sqlRegister = `INSERT INTO {registry} (name, fingerprint, definition) VALUES ($1, $2, $3::jsonb)
ON CONFLICT (name) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, definition = EXCLUDED.definition, updated_at = now()`

	// sqlDefinition is the fingerprint and definition of index $1.
	sqlDefinition = `SELECT fingerprint, definition::text FROM {registry} WHERE name = $1`
)

// Statements on an index's table. {table} is the table and {pk} its
// primary key, quoted; {registry} the registry table.
const (
	sqlDropTable = `DROP TABLE IF EXISTS {table}`

	// sqlCreateTable has {fields}: a text column per searchable field. IDs
	// order bytewise (equal ranks are ordered by ID), whatever the
	// database's collation.
	sqlCreateTable = `CREATE TABLE {table} (
	tenant_id uuid NOT NULL,
	id text COLLATE "C" NOT NULL,
	vals jsonb NOT NULL DEFAULT '{}',{fields}
	CONSTRAINT {pk} PRIMARY KEY (tenant_id, id)
)`

	// sqlPut adds the documents or replaces those of the same tenant and
	// id, in one statement; $1 is the index's name, $2 its fingerprint, $3
	// the tenants, $4 the ids, $5 the values as JSON objects and $6… a
	// text array per field: {cols} their columns, {params} their
	// parameters, {names} their names in unnest, {values} those of the
	// select list and {sets} the updates.
	// It writes nothing when the index's fingerprint is no longer $2 (its
	// table was made anew by another engine's Ensure): the caller reloads
	// the index and puts again.
	sqlPut = `INSERT INTO {table} (tenant_id, id, vals{cols})
SELECT d.tenant_id::uuid, d.id, d.vals::jsonb{values}
FROM unnest($3::text[], $4::text[], $5::text[]{params}) AS d(tenant_id, id, vals{names})
WHERE EXISTS (SELECT FROM {registry} WHERE name = $1 AND fingerprint = $2)
ON CONFLICT (tenant_id, id) DO UPDATE SET vals = EXCLUDED.vals{sets}`

	// sqlDelete removes the documents of tenant $1 with the ids $2.
	sqlDelete = `DELETE FROM {table} WHERE tenant_id = $1::text::uuid AND id = ANY($2::text[])`
)

// The conditions of a search (internal/searchsql's Target.Where); %d are
// the numbers of their parameters.
const (
	// whereTenant: the tenant's documents only.
	whereTenant = `tenant_id = $%d::text::uuid`
	// whereFingerprint: nothing when the index's table was made anew by
	// another engine's Ensure (the caller reloads the index and searches
	// again); $%d are the index's name and fingerprint.
	whereFingerprint = `EXISTS (SELECT FROM {registry} WHERE name = $%d AND fingerprint = $%d)`
	// whereFilter: a filter value equals the document's; $%d are the
	// filter's name and value.
	whereFilter = `(vals ->> $%d::text) = $%d::text`
	// selectHit is what a hit returns of its row (searchsql's page).
	selectHit = `page.id`
	// keyCol is the column that orders equal ranks, and its type.
	keyCol, keyType = "id", "text"
)

// queries are the engine's statements on its schema.
type queries struct {
	schema   string // quoted
	registry string // quoted, qualified
	r        *strings.Replacer
}

func newQueries(schema string) queries {
	q := queries{schema: pgx.Identifier{schema}.Sanitize(), registry: pgx.Identifier{schema, registryTable}.Sanitize()}
	q.r = strings.NewReplacer("{schema}", q.schema, "{registry}", q.registry)
	return q
}

// of fills in the schema and the registry.
func (q queries) of(stmt string) string { return q.r.Replace(stmt) }

// tableQueries are the statements on one index's table.
type tableQueries struct {
	create, drop, put, delete string
	// fingerprint is whereFingerprint on the registry.
	fingerprint string
}

// newTableQueries returns the statements on table (quoted, qualified) with
// the primary key pk (quoted) and the field columns cols (quoted), in
// order.
func (q queries) newTableQueries(table, pk string, cols []string) tableQueries {
	var fields, colList, params, names, values, sets strings.Builder
	for i, c := range cols {
		fmt.Fprintf(&fields, "\n\t%s text,", c)
		fmt.Fprintf(&colList, ", %s", c)
		fmt.Fprintf(&params, ", $%d::text[]", 6+i)
		fmt.Fprintf(&names, ", c%d", i)
		fmt.Fprintf(&values, ", d.c%d", i)
		fmt.Fprintf(&sets, ", %s = EXCLUDED.%s", c, c)
	}
	r := strings.NewReplacer("{table}", table, "{pk}", pk, "{registry}", q.registry,
		"{fields}", fields.String(), "{cols}", colList.String(), "{params}", params.String(),
		"{names}", names.String(), "{values}", values.String(), "{sets}", sets.String())
	return tableQueries{
		create:      r.Replace(sqlCreateTable),
		drop:        r.Replace(sqlDropTable),
		put:         r.Replace(sqlPut),
		delete:      r.Replace(sqlDelete),
		fingerprint: r.Replace(whereFingerprint),
	}
}
