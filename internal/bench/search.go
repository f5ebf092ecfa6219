package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/eventstore"
	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/pipeline"
	"github.com/kumiko-go/kumiko/registry"
)

// docFeature is an entity of a title and a body, searchable or not.
func docFeature(searchable bool) *feature.Feature {
	return feature.Define("docs", func(r *feature.Registrar) {
		r.Entity("doc", feature.Fields{"title": feature.Text().Required(), "body": feature.Text()})
		r.Crud("doc", feature.Access{Write: feature.AnyUser(), Read: feature.AnyUser()})
		if searchable {
			r.Search("doc", feature.SearchFields{"title": feature.WeightA, "body": feature.WeightB})
		}
	})
}

// searchVocabulary is how many distinct words the documents are made of.
const searchVocabulary = 20_000

// searchWord is word i of the vocabulary: six letters.
func searchWord(i int) string {
	b := make([]byte, 6)
	for j := range b {
		b[j] = 'a' + byte(i%26)
		i /= 26
	}
	return string(b)
}

// searchRows measures search (docs/search.md) in two comparisons, each
// against the same work without it in the same run:
//
//   - a CRUD create of a document of 8 title and 40 body words with its
//     search index kept in the write transaction, against the same create
//     of the entity without Search; goal ≥ 0.6;
//   - doc.search for one word on a read table of n.searchRows documents
//     (1,000,000; a tenth with -quick), against the same tsvector query
//     written by hand on the same indexes (each word in one of the
//     fields, ts_rank, the best 20); goal ≥ 0.8.
func (b *bench) searchRows(ctx context.Context) ([]row, error) {
	fwSchema := b.store.Schema() + "_search"
	plainSchema := fwSchema + "_plain"
	var rows []row
	execs := make([]*pipeline.Executor, 2)
	stores := make([]*eventstore.Store, 2)
	for i, schema := range []string{fwSchema, plainSchema} {
		reg, err := registry.Build(docFeature(i == 0))
		if err != nil {
			return nil, err
		}
		if stores[i], err = eventstore.New(b.pool, eventstore.Config{Schema: schema, Upcaster: reg}); err != nil {
			return nil, err
		}
		if err := migrateAll(ctx, stores[i]); err != nil {
			return nil, err
		}
		if execs[i], err = pipeline.New(reg, stores[i], pipeline.Config{}); err != nil {
			return nil, err
		}
		if err := execs[i].EnsureSchema(ctx); err != nil {
			return nil, err
		}
	}
	defer stores[1].Close()
	defer dropSchemas(b.pool, stores[0], fwSchema, plainSchema)

	caller := pipeline.Caller{User: feature.User{ID: benchUser, TenantID: b.tenant, Roles: []string{"User"}, Authenticated: true}}
	words := func(rng *rand.Rand, n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = searchWord(rng.IntN(searchVocabulary))
		}
		return strings.Join(w, " ")
	}
	create := func(d *pipeline.Executor) opFunc {
		rng := rand.New(rand.NewPCG(1, 2))
		return func(ctx context.Context, _ int) (int, error) {
			payload, _ := json.Marshal(map[string]string{"title": words(rng, 8), "body": words(rng, 40)})
			_, err := d.Write(ctx, caller, pipeline.Request{Type: "doc.create", Payload: payload})
			return 1, err
		}
	}
	r, err := b.compare(ctx, pair{
		name: "create with its search index (raw: the same entity without Search)", unit: "ops/s", workers: 1,
		fw: create(execs[0]), raw: create(execs[1]), goal: atLeastOfRaw(0.6),
	})
	rows = append(rows, r)
	if err != nil {
		return rows, err
	}

	n := b.n.searchRows
	fmt.Fprintf(os.Stderr, "  seeding %d searchable documents …\n", n)
	table := pgx.Identifier{fwSchema, "read_doc"}.Sanitize()
	start := time.Now()
	// Without the search indexes, built again after: a bulk load.
	var indexes []string
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		rs, err := tx.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'read_doc' AND indexname LIKE 'kumiko\_search\_%'`, fwSchema)
		if err != nil {
			return err
		}
		if indexes, err = pgx.CollectRows(rs, pgx.RowTo[string]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DO $$ DECLARE i text; BEGIN
FOR i IN SELECT quote_ident(schemaname) || '.' || quote_ident(indexname) FROM pg_indexes WHERE schemaname = '`+fwSchema+`' AND tablename = 'read_doc' AND indexname LIKE 'kumiko\_search\_%' LOOP
	EXECUTE 'DROP INDEX ' || i;
END LOOP; END $$`)
		return err
	}); err != nil {
		return rows, fmt.Errorf("drop the search indexes: %w", err)
	}
	// Word r of the vocabulary (searchWord) in SQL: r < 26⁴, so its last
	// two letters are "aa".
	const word = `chr(97 + r % 26) || chr(97 + r / 26 % 26) || chr(97 + r / 676 % 26) || chr(97 + r / 17576 % 26) || 'aa'`
	text := func(words string) string {
		return `(SELECT string_agg(` + word + `, ' ') FROM (SELECT floor(random() * $3)::int AS r FROM generate_series(1, ` + words + ` + 0 * g)) AS x)`
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO `+table+` (id, tenant_id, version, title, body, created_at, updated_at)
SELECT gen_random_uuid(), $1, 1, `+text("8")+`, `+text("40")+`, now(), now()
FROM generate_series(1, $2) AS g`, b.tenant, n, searchVocabulary); err != nil {
		return rows, fmt.Errorf("seed documents: %w", err)
	}
	for _, ix := range indexes {
		if _, err := b.pool.Exec(ctx, ix); err != nil {
			return rows, fmt.Errorf("build the search indexes: %w", err)
		}
	}
	if _, err := b.pool.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
		return rows, err
	}
	fmt.Fprintf(os.Stderr, "  seeded in %s\n", time.Since(start).Round(time.Second))

	// The hand-written query: the vectors the framework keeps, by name.
	var titleVec, bodyVec string
	if err := b.pool.QueryRow(ctx, `SELECT
	(SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attname LIKE 'kumiko\_search\_title\_%'),
	(SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attname LIKE 'kumiko\_search\_body\_%')`, table).Scan(&titleVec, &bodyVec); err != nil {
		return rows, err
	}
	tv, bv := pgx.Identifier{titleVec}.Sanitize(), pgx.Identifier{bodyVec}.Sanitize()
	hand := `SELECT id, version, title, body, created_at, updated_at, ts_rank(` + tv + ` || ` + bv + `, q) AS rank
FROM ` + table + `, to_tsquery('simple', $2) AS q
WHERE tenant_id = $1 AND (` + tv + ` @@ q OR ` + bv + ` @@ q)
ORDER BY rank DESC, id LIMIT 21`
	var next int
	query := func() string { next++; return searchWord((next * 7919) % searchVocabulary) }
	r, err = b.compare(ctx, pair{
		name: fmt.Sprintf("search for a word in %d documents (raw: the tsvector query by hand)", n), unit: "queries/s", workers: 1,
		fw: func(ctx context.Context, _ int) (int, error) {
			_, err := execs[0].Query(ctx, caller, pipeline.Request{Type: "doc.search",
				Payload: json.RawMessage(fmt.Sprintf(`{"q":%q,"limit":20}`, query()))})
			return 1, err
		},
		raw: func(ctx context.Context, _ int) (int, error) {
			rs, err := b.pool.Query(ctx, hand, b.tenant, "'"+query()+"':*")
			if err != nil {
				return 0, err
			}
			for rs.Next() {
				if _, err := rs.Values(); err != nil {
					rs.Close()
					return 0, err
				}
			}
			return 1, rs.Err()
		},
		goal: atLeastOfRaw(0.8),
	})
	return append(rows, r), err
}
