// Package searchsql is full-text search in a PostgreSQL table: the
// generated tsvector columns and indexes that make a table searchable and
// the query that searches it. The read tables' search
// (internal/projection) and the reference engine (search/pgsearch) are
// made of it.
//
// Each searchable field has a generated tsvector column (its words, with
// the field's weight) with a GIN index, and a trigram index of the field
// itself (pg_trgm) for words with a typo. Generated columns follow every
// write of the row in its transaction. A column's name holds a hash of
// what it is made of (field, weight, configuration), so a changed
// declaration adds new columns and drops the old ones.
package searchsql

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/search"
)

// ColumnPrefix starts the names of the search columns and indexes.
const ColumnPrefix = "kumiko_search_"

// typoThreshold is the least pg_trgm word similarity between the query's
// words and a field at which the field matches with a typo: one wrong,
// missing or swapped letter in a word of seven or more letters.
const typoThreshold = "0.4"

// rankedChars is how many characters of a field a typo match's rank
// looks at.
const rankedChars = 500

// Field is a searchable field of a table.
type Field struct {
	// Name is the field's name (a JSON name).
	Name string
	// Col is its text column, quoted.
	Col string
	// Vector is its generated tsvector column, Index that column's GIN
	// index and Trgm the trigram index of Col; unquoted.
	Vector, Index, Trgm string
	Weight              byte
}

// Fields are the searchable fields of weights in table (its name,
// unquoted: index names are unique in a schema), by name; col maps a
// field to its column, quoted, and base to the name its tsvector column's
// is made of (a column name, unquoted).
func Fields(table, config string, weights map[string]byte, col, base func(string) string) []Field {
	var out []Field
	for _, name := range slices.Sorted(maps.Keys(weights)) {
		made := name + "\x00" + string(weights[name]) + "\x00" + config
		h, ih := sha256.Sum256([]byte(made)), sha256.Sum256([]byte(table+"\x00"+made))
		// At most 14 + 20 + 1 + 8 + 1 + 8 + 5 bytes with "_trgm":
		// PostgreSQL would cut a name past 63, and the cut name would not
		// be kept.
		b := base(name)
		if len(b) > 20 {
			b = b[:20]
		}
		vector := ColumnPrefix + b + "_" + hex.EncodeToString(h[:4])
		index := vector + "_" + hex.EncodeToString(ih[:4])
		out = append(out, Field{Name: name, Col: col(name), Weight: weights[name],
			Vector: vector, Index: index + "_idx", Trgm: index + "_trgm"})
	}
	return out
}

// Querier runs a query; a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CreateTrgm creates pg_trgm in public when the database has it nowhere
// (not in an app's schema, which a test may drop) and returns the schema
// holding it, quoted.
func CreateTrgm(ctx context.Context, tx pgx.Tx) (string, error) {
	if schema, err := FindTrgm(ctx, tx); err == nil {
		return schema, nil
	}
	// CREATE EXTENSION IF NOT EXISTS is no guard against another
	// transaction creating it at the same time (a second app of the
	// database starting): the lock makes the second wait and find it.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('kumiko.extension.pg_trgm', 0))`); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public`); err != nil {
		return "", fmt.Errorf("search needs the extension pg_trgm (package postgresql-contrib): %w", err)
	}
	return FindTrgm(ctx, tx)
}

// FindTrgm returns the schema holding pg_trgm, quoted.
func FindTrgm(ctx context.Context, db Querier) (string, error) {
	var schema string
	err := db.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'`).Scan(&schema)
	if err != nil {
		return "", fmt.Errorf("search needs the extension pg_trgm, which is created when the schema is: %w", err)
	}
	return pgx.Identifier{schema}.Sanitize(), nil
}

// Trgm remembers the schema holding pg_trgm, quoted, once it is known.
// The zero value is ready; it is safe for concurrent use.
type Trgm struct{ schema atomic.Pointer[string] }

// Schema returns the schema holding pg_trgm, looking it up in db once.
func (c *Trgm) Schema(ctx context.Context, db Querier) (string, error) {
	if v := c.schema.Load(); v != nil {
		return *v, nil
	}
	schema, err := FindTrgm(ctx, db)
	if err != nil {
		return "", err
	}
	c.schema.Store(&schema)
	return schema, nil
}

// Set records schema, as Ensure returned it.
func (c *Trgm) Set(schema string) { c.schema.Store(&schema) }

// Ensure adds the search columns and indexes of fields to table (quoted,
// in schema, unquoted) and drops those of an earlier declaration; it
// returns the schema of pg_trgm, quoted, and whether it added a column.
func Ensure(ctx context.Context, tx pgx.Tx, schema, table, config string, fields []Field) (trgm string, added bool, err error) {
	if trgm, err = CreateTrgm(ctx, tx); err != nil {
		return "", false, err
	}
	have, err := searchObjects(ctx, tx, table)
	if err != nil {
		return "", false, err
	}
	keep := map[string]bool{}
	for _, f := range fields {
		vec := pgx.Identifier{f.Vector}.Sanitize()
		keep[f.Vector], keep[f.Index], keep[f.Trgm] = true, true, true
		added = added || !have[f.Vector]
		for _, stmt := range []string{
			fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s tsvector GENERATED ALWAYS AS (setweight(to_tsvector(%s::regconfig, coalesce(%s, '')), '%c')) STORED`,
				table, vec, quoteLiteral(config), f.Col, f.Weight),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING gin (%s)`, pgx.Identifier{f.Index}.Sanitize(), table, vec),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING gin (%s %s.gin_trgm_ops)`, pgx.Identifier{f.Trgm}.Sanitize(), table, f.Col, trgm),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return "", false, err
			}
		}
	}
	// What an earlier declaration left: its columns (their GIN indexes go
	// with them) and its trigram indexes.
	for _, n := range slices.Sorted(maps.Keys(have)) {
		if keep[n] {
			continue
		}
		stmt := fmt.Sprintf(`DROP INDEX IF EXISTS %s`, pgx.Identifier{schema, n}.Sanitize())
		if !strings.HasSuffix(n, "_idx") && !strings.HasSuffix(n, "_trgm") {
			stmt = fmt.Sprintf(`ALTER TABLE %s DROP COLUMN IF EXISTS %s`, table, pgx.Identifier{n}.Sanitize())
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return "", false, fmt.Errorf("drop %s: %w", n, err)
		}
	}
	return trgm, added, nil
}

// searchObjects are the names of table's search columns and indexes.
func searchObjects(ctx context.Context, tx pgx.Tx, table string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attname LIKE $2
UNION ALL SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass AND c.relname LIKE $2`,
		table, ColumnPrefix+"%")
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	return have, err
}

// quoteLiteral quotes s as an SQL string literal (s is an identifier the
// caller checked).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Words are the words of a search's text: runs of letters and digits,
// lowercased, at most search.MaxWords.
func Words(q string) []string {
	words := strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(words) > search.MaxWords {
		words = words[:search.MaxWords]
	}
	return words
}

// Key is a column of the key hits are ordered by after their rank.
type Key struct {
	// Col is the column, quoted; Type its SQL type.
	Col, Type string
}

// Target is a table to search and who searches it.
type Target struct {
	// Table is the table, quoted.
	Table string
	// Config is the text search configuration of its search columns.
	Config string
	// Trgm is the schema of pg_trgm, quoted.
	Trgm string
	// Where are conditions every hit meets (tenant, filters) with
	// parameters $1… of Args.
	Where []string
	Args  []any
	// Fields are the searchable fields that may match.
	Fields []Field
	// Select is what a hit returns of its row.
	Select string
	// Key orders equal ranks; unique in the rows Where keeps.
	Key []Key
}

// Hit is a row a search found.
type Hit struct {
	// Values are the row's values of Target.Select.
	Values []any
	Rank   float64
	// Highlights holds a snippet of each field that matched.
	Highlights map[string]string
}

// cursor is the position after a page: the query it belongs to, whether
// its pages match with typos, and the rank and key of the page's last hit.
type cursor struct {
	Query string   `json:"q"`
	Typos bool     `json:"t,omitempty"`
	Rank  float32  `json:"r"`
	Key   []string `json:"k"`
}

// DB is what a search runs on: a pool.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Search answers the words of text in t: the rows in which every word
// matches one of t.Fields, best first, then by key, with highlighted
// snippets, at most limit after the position of after (a NextCursor). A
// word matches as the prefix of a word of the field; when no row matches
// so, the search matches again with typos (trigram similarity), and its
// pages stay so. A cursor of another search is search.ErrInvalidCursor.
func Search(ctx context.Context, db DB, t Target, text string, limit int, after string) (hits []Hit, next string, err error) {
	words := Words(text)
	if len(words) == 0 || len(t.Fields) == 0 {
		return nil, "", nil
	}
	// The query, as the cursor binds it: the words and the fields they
	// are matched in.
	fingerprint := strings.Join(words, " ")
	for _, f := range t.Fields {
		fingerprint += "\x00" + f.Name
	}
	h := sha256.Sum256([]byte(fingerprint))
	queryID := base64.RawURLEncoding.EncodeToString(h[:12])
	var cur *cursor
	if after != "" {
		cur = &cursor{}
		raw, err := base64.RawURLEncoding.DecodeString(after)
		if err == nil {
			err = json.Unmarshal(raw, cur)
		}
		if err != nil || cur.Query != queryID || len(cur.Key) != len(t.Key) || math.IsNaN(float64(cur.Rank)) || math.IsInf(float64(cur.Rank), 0) {
			return nil, "", search.ErrInvalidCursor
		}
	}
	typos := cur != nil && cur.Typos
	hits, keys, err := page(ctx, db, t, words, limit, cur, typos)
	if err == nil && len(hits) == 0 && cur == nil {
		typos = true
		hits, keys, err = page(ctx, db, t, words, limit, nil, true)
	}
	if err != nil {
		return nil, "", err
	}
	if len(hits) > limit {
		hits = hits[:limit]
		raw, _ := json.Marshal(cursor{Query: queryID, Typos: typos, Rank: float32(hits[limit-1].Rank), Key: keys[limit-1]})
		next = base64.RawURLEncoding.EncodeToString(raw)
	}
	return hits, next, nil
}

// page runs one page of words in t (up to one hit more than limit) after
// cur, matching with typos or not; it returns the hits and their keys.
func page(ctx context.Context, db DB, t Target, words []string, limit int, cur *cursor, typos bool) ([]Hit, [][]string, error) {
	prefixes := make([]string, len(words))
	for i, w := range words {
		prefixes[i] = "'" + w + "':*" // letters and digits only: nothing to escape
	}
	args := slices.Clone(t.Args)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	// Any word's prefix, which ranks and highlights; the words, for the
	// typo similarity; the configuration.
	anyPrefix, allWords, config := arg(strings.Join(prefixes, " | ")), arg(strings.Join(words, " ")), arg(t.Config)
	where := slices.Clone(t.Where)
	similarTo := "kq.kumiko_words OPERATOR(" + t.Trgm + ".<%) "
	// Each word must match a field.
	for i, w := range words {
		prefix, word := fmt.Sprintf("to_tsquery(%s::regconfig, %s)", config, arg(prefixes[i])), ""
		if typos {
			word = arg(w) + "::text"
		}
		var anyField []string
		for _, f := range t.Fields {
			anyField = append(anyField, pgx.Identifier{f.Vector}.Sanitize()+" @@ "+prefix)
			if typos {
				anyField = append(anyField, word+" OPERATOR("+t.Trgm+".<%) "+f.Col)
			}
		}
		where = append(where, "("+strings.Join(anyField, " OR ")+")")
	}
	var vectors, similar, heads []string
	for _, f := range t.Fields {
		vec := pgx.Identifier{f.Vector}.Sanitize()
		vectors = append(vectors, vec)
		matched := vec + " @@ kq.kumiko_q"
		if typos {
			// A typo match ranks by its similarity, scaled like ts_rank's
			// weights, in the field's first rankedChars characters: its
			// time grows with the square of the text's length (a
			// repetitive 100 kB text took 20 s).
			similar = append(similar, fmt.Sprintf("CASE WHEN %s @@ kq.kumiko_q THEN 0 ELSE %s.word_similarity(kq.kumiko_words, left(coalesce(%s, ''), %d)) * %s END",
				vec, t.Trgm, f.Col, rankedChars, weightScale(f.Weight)))
			matched += " OR " + similarTo + f.Col
		}
		heads = append(heads, fmt.Sprintf(`CASE WHEN %s
	THEN ts_headline(kq.kumiko_config, %s, kq.kumiko_q, 'StartSel="`+markStart+`", StopSel="`+markStop+`", MaxWords=24, MinWords=8') END`,
			matched, f.Col))
	}
	rank := fmt.Sprintf("ts_rank(%s, kq.kumiko_q)::real", strings.Join(vectors, " || "))
	if typos {
		rank = fmt.Sprintf("(ts_rank(%s, kq.kumiko_q) + greatest(%s))::real", strings.Join(vectors, " || "), strings.Join(similar, ", "))
	}
	keyCols, keyText, pageOrder := make([]string, len(t.Key)), make([]string, len(t.Key)), make([]string, len(t.Key))
	for i, k := range t.Key {
		keyCols[i], keyText[i], pageOrder[i] = k.Col, fmt.Sprintf("page.%s::text AS kumiko_key_%d", k.Col, i), "page."+k.Col
	}
	afterCond := ""
	if cur != nil {
		r := arg(cur.Rank) + "::real"
		vals := make([]string, len(t.Key))
		for i, k := range t.Key {
			vals[i] = arg(cur.Key[i]) + "::text::" + k.Type
		}
		afterCond = fmt.Sprintf("WHERE kumiko_rank < %s OR (kumiko_rank = %s AND (%s) > (%s))", r, r, strings.Join(keyCols, ", "), strings.Join(vals, ", "))
	}
	order := "kumiko_rank DESC, " + strings.Join(keyCols, ", ")
	// The page is found first; only its rows get snippets.
	sql := fmt.Sprintf(`WITH kq AS (SELECT to_tsquery(%s::regconfig, %s) AS kumiko_q, %s::text AS kumiko_words, %s::regconfig AS kumiko_config)
SELECT %s, %s, page.kumiko_rank, %s FROM (
	SELECT * FROM (SELECT %s.*, %s AS kumiko_rank FROM %s, kq WHERE %s) hits %s ORDER BY %s LIMIT %d
) page, kq ORDER BY page.kumiko_rank DESC, %s`,
		config, anyPrefix, allWords, config,
		t.Select, strings.Join(keyText, ", "), strings.Join(heads, ", "),
		t.Table, rank, t.Table, strings.Join(where, " AND "), afterCond, order, limit+1, strings.Join(pageOrder, ", "))
	var hits []Hit
	var keys [][]string
	run := func(q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	}) error {
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		hits, keys, err = scanHits(rows, len(t.Key), t.Fields)
		return err
	}
	if !typos {
		err := run(db)
		return hits, keys, translate(err)
	}
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('pg_trgm.word_similarity_threshold', '`+typoThreshold+`', true)`); err != nil {
			return err
		}
		return run(tx)
	})
	return hits, keys, translate(err)
}

// translate turns a cursor key its column's type refuses (a cursor made
// up by hand) into search.ErrInvalidCursor.
func translate(err error) error {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) && (pg.SQLState() == "22P02" || pg.SQLState() == "22007" || pg.SQLState() == "22008" || pg.SQLState() == "22003") {
		return search.ErrInvalidCursor
	}
	return err
}

// The markers ts_headline puts around a match; the snippet is
// HTML-escaped and they become <mark> and </mark>.
const (
	markStart = "\uE000"
	markStop  = "\uE001"
)

var markReplacer = strings.NewReplacer(markStart, "<mark>", markStop, "</mark>")

// weightScale is the factor of a typo match's similarity in a field of
// weight w: ts_rank's default weight of w.
func weightScale(w byte) string {
	switch w {
	case 'A':
		return "1.0"
	case 'B':
		return "0.4"
	case 'C':
		return "0.2"
	}
	return "0.1"
}

// scanHits reads the rows of a search: the row's values, the key's n
// values as text, its rank, then one headline per field.
func scanHits(rows pgx.Rows, n int, fields []Field) ([]Hit, [][]string, error) {
	defer rows.Close()
	var hits []Hit
	var keys [][]string
	width := len(rows.FieldDescriptions())
	rowCols := width - n - 1 - len(fields)
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, nil, err
		}
		hit := Hit{Values: vals[:rowCols], Highlights: map[string]string{}}
		key := make([]string, n)
		for i := range n {
			key[i], _ = vals[rowCols+i].(string)
		}
		if r, ok := vals[rowCols+n].(float32); ok {
			hit.Rank = float64(r)
		}
		for i, f := range fields {
			if s, ok := vals[rowCols+n+1+i].(string); ok && strings.Contains(s, markStart) {
				hit.Highlights[f.Name] = markReplacer.Replace(html.EscapeString(strings.TrimSpace(s)))
			}
		}
		hits = append(hits, hit)
		keys = append(keys, key)
	}
	return hits, keys, rows.Err()
}
