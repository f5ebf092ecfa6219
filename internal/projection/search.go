package projection

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/feature"
	"github.com/kumiko-go/kumiko/internal/spec"
	"github.com/kumiko-go/kumiko/kumikotype"
	"github.com/kumiko-go/kumiko/registry"
)

// An entity's full-text search (feature.Registrar.Search) lives in its read
// table: each searchable field has a generated tsvector column (its words,
// with the field's weight) with a GIN index, and a trigram index of the
// field itself (pg_trgm) for words with a typo. Generated columns follow
// every write of the row in its transaction, a rebuild, and a forget that
// nulls a personal field. A column's name holds a hash of what it is made
// of (field, weight, configuration), so a changed declaration adds new
// columns at the next start and drops the old ones.

// searchColumnPrefix starts the names of the search columns and indexes.
const searchColumnPrefix = "kumiko_search_"

// typoThreshold is the least pg_trgm word similarity between the query's
// words and a field at which the field matches with a typo: one wrong,
// missing or swapped letter in a word of seven or more letters.
const typoThreshold = "0.4"

// searchField is a searchable field of an entity's read table.
type searchField struct {
	name   string // JSON name
	col    string // its column, quoted
	vector string // its tsvector column, unquoted
	weight byte
}

// searchPlan is an entity's search as its read table holds it.
type searchPlan struct {
	config string
	fields []searchField // by name
}

func newSearchPlan(t *Entity) *searchPlan {
	s, ok := t.e.Search()
	if !ok {
		return nil
	}
	p := &searchPlan{config: s.Config}
	for _, name := range slices.Sorted(maps.Keys(s.Fields)) {
		h := sha256.Sum256([]byte(name + "\x00" + string(s.Fields[name]) + "\x00" + s.Config))
		// At most 14 + 20 + 1 + 8 + 5 bytes with "_trgm": PostgreSQL
		// would cut a name past 63, and the cut name would not be kept.
		col := spec.ColumnName(name)
		if len(col) > 20 {
			col = col[:20]
		}
		p.fields = append(p.fields, searchField{name: name, col: t.cols[name], weight: s.Fields[name],
			vector: searchColumnPrefix + col + "_" + hex.EncodeToString(h[:4])})
	}
	return p
}

// createTrgm creates pg_trgm in public when the database has it nowhere
// (not in an app's schema, which a test may drop) and returns the schema
// holding it, quoted.
func createTrgm(ctx context.Context, tx pgx.Tx) (string, error) {
	if schema, err := findTrgm(ctx, tx); err == nil {
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
	return findTrgm(ctx, tx)
}

// findTrgm returns the schema holding pg_trgm, quoted.
func findTrgm(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var schema string
	err := db.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'`).Scan(&schema)
	if err != nil {
		return "", fmt.Errorf("search needs the extension pg_trgm, which EnsureSchema creates: %w", err)
	}
	return pgx.Identifier{schema}.Sanitize(), nil
}

// trgmSchema is the schema holding pg_trgm, quoted, looked up once.
func (s *Side) trgmSchema(ctx context.Context) (string, error) {
	if v := s.trgm.Load(); v != nil {
		return *v, nil
	}
	schema, err := findTrgm(ctx, s.pool)
	if err != nil {
		return "", err
	}
	s.trgm.Store(&schema)
	return schema, nil
}

// ensureSearch adds an entity's search columns and indexes to its read
// table and drops those of an earlier declaration.
func (s *Side) ensureSearch(ctx context.Context, tx pgx.Tx, t *Entity) error {
	p := t.search
	if p == nil {
		return nil
	}
	trgm, err := createTrgm(ctx, tx)
	if err != nil {
		return err
	}
	s.trgm.Store(&trgm)
	def := t.e.Table()
	keep := map[string]bool{}
	for _, f := range p.fields {
		vec := pgx.Identifier{f.vector}.Sanitize()
		keep[f.vector] = true
		trgmIndex := f.vector + "_trgm"
		keep[trgmIndex] = true
		for _, stmt := range []string{
			fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s tsvector GENERATED ALWAYS AS (setweight(to_tsvector(%s::regconfig, coalesce(%s, '')), '%c')) STORED`,
				t.table, vec, quoteLiteral(p.config), f.col, f.weight),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING gin (%s)`, pgx.Identifier{f.vector + "_idx"}.Sanitize(), t.table, vec),
			fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING gin (%s %s.gin_trgm_ops)`, pgx.Identifier{trgmIndex}.Sanitize(), t.table, f.col, trgm),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("search of %s: %w", t.e.Name(), err)
			}
		}
		keep[f.vector+"_idx"] = true
	}
	// What an earlier declaration left: its columns (their GIN indexes go
	// with them) and its trigram indexes.
	rows, err := tx.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attname LIKE $2
UNION ALL SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass AND c.relname LIKE $2`,
		t.table, searchColumnPrefix+"%")
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if keep[n] {
			continue
		}
		stmt := fmt.Sprintf(`DROP INDEX IF EXISTS %s`, pgx.Identifier{s.schema, n}.Sanitize())
		if !strings.HasSuffix(n, "_idx") && !strings.HasSuffix(n, "_trgm") {
			stmt = fmt.Sprintf(`ALTER TABLE %s DROP COLUMN IF EXISTS %s`, t.table, pgx.Identifier{n}.Sanitize())
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("search of %s: drop %s: %w", def.Name, n, err)
		}
	}
	return nil
}

// quoteLiteral quotes s as an SQL string literal (s is an identifier the
// registry checked).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// SearchResult is a page of an entity's search.
type SearchResult struct {
	Hits []SearchHit `json:"hits"`
	// NextCursor continues after the page; "" on the last.
	NextCursor string `json:"nextCursor"`
}

// SearchHit is one row a search found.
type SearchHit struct {
	// Row is the row as the caller may see it.
	Row map[string]any `json:"row"`
	// Rank orders the hits: higher is better.
	Rank float64 `json:"rank"`
	// Highlights holds, for each searchable field the caller may read
	// that matched, a snippet of it with the matches in <mark>…</mark>;
	// the rest of the snippet is HTML-escaped.
	Highlights map[string]string `json:"highlights"`
}

// searchCursor is the position after a page: the query it belongs to,
// whether its pages match with typos, and the rank and id of the page's
// last hit.
type searchCursor struct {
	Query string    `json:"q"`
	Typos bool      `json:"t,omitempty"`
	Rank  float32   `json:"r"`
	ID    uuid.UUID `json:"i"`
}

// searchWords are the words of a search's text: runs of letters and
// digits, lowercased, at most MaxSearchWords.
func searchWords(q string) []string {
	words := strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(words) > registry.MaxSearchWords {
		words = words[:registry.MaxSearchWords]
	}
	return words
}

// searchQuery is one search as SQL is made of it.
type searchQuery struct {
	t        *Entity
	u        feature.User
	in       registry.SearchInput
	words    []string
	readable []searchField
	trgm     string // the schema of pg_trgm, quoted
}

// Search answers an entity's search query for u: the rows of u's tenant
// in which every word of in.Q matches a searchable field u may read, best
// first, then by id, with highlighted snippets. A word matches as the
// prefix of a word of the field; when no row matches so, the search
// matches again with typos (trigram similarity), and its pages stay so.
func (s *Side) Search(ctx context.Context, u feature.User, t *Entity, in registry.SearchInput) (SearchResult, error) {
	p := t.search
	if p == nil {
		return SearchResult{}, fmt.Errorf("entity %s has no search", t.e.Name())
	}
	for f := range in.Filter {
		if err := t.checkRead(u, f); err != nil {
			return SearchResult{}, err
		}
	}
	q := searchQuery{t: t, u: u, in: in, words: searchWords(in.Q)}
	for _, f := range p.fields {
		if t.specs[f.name].CanRead(u.Authenticated, u.HasRole) {
			q.readable = append(q.readable, f)
		}
	}
	res := SearchResult{Hits: []SearchHit{}}
	if len(q.words) == 0 || len(q.readable) == 0 {
		return res, nil
	}
	// The query, as the cursor binds it: the words and the fields they
	// are matched in.
	fingerprint := strings.Join(q.words, " ")
	for _, f := range q.readable {
		fingerprint += "\x00" + f.name
	}
	h := sha256.Sum256([]byte(fingerprint))
	queryID := base64.RawURLEncoding.EncodeToString(h[:12])
	var cur *searchCursor
	if in.Cursor != "" {
		cur = &searchCursor{}
		raw, err := base64.RawURLEncoding.DecodeString(in.Cursor)
		if err == nil {
			err = json.Unmarshal(raw, cur)
		}
		if err == nil && (cur.Query != queryID || math.IsNaN(float64(cur.Rank)) || math.IsInf(float64(cur.Rank), 0)) {
			err = fmt.Errorf("the cursor belongs to another search")
		}
		if err != nil {
			return res, kumikotype.NewError(kumikotype.CodeValidation, kumikotype.ReasonInvalidCursor, "the cursor does not belong to this search", err)
		}
	}
	var err error
	if q.trgm, err = s.trgmSchema(ctx); err != nil {
		return res, err
	}
	typos := cur != nil && cur.Typos
	hits, err := s.searchHits(ctx, q, cur, typos)
	if err == nil && len(hits) == 0 && cur == nil {
		typos = true
		hits, err = s.searchHits(ctx, q, nil, true)
	}
	if err != nil {
		return res, err
	}
	if len(hits) > in.Limit {
		hits = hits[:in.Limit]
		last := hits[len(hits)-1]
		id, _ := uuid.Parse(fmt.Sprint(last.Row["id"]))
		raw, _ := json.Marshal(searchCursor{Query: queryID, Typos: typos, Rank: float32(last.Rank), ID: id})
		res.NextCursor = base64.RawURLEncoding.EncodeToString(raw)
	}
	for i := range hits {
		hits[i].Row = t.Visible(hits[i].Row, u)
	}
	res.Hits = hits
	return res, nil
}

// searchHits runs one page of q (up to one hit more than its limit) after
// cur, matching with typos or not.
func (s *Side) searchHits(ctx context.Context, q searchQuery, cur *searchCursor, typos bool) ([]SearchHit, error) {
	t := q.t
	prefixes := make([]string, len(q.words))
	for i, w := range q.words {
		prefixes[i] = "'" + w + "':*" // letters and digits only: nothing to escape
	}
	// $2: any word's prefix, which ranks and highlights; $3: the words, for
	// the typo similarity; $4: the configuration. Each word must match a
	// readable field.
	args := []any{[16]byte(t.Tenant(q.u)), strings.Join(prefixes, " | "), strings.Join(q.words, " "), t.search.config}
	arg := func(v any, typ string) string {
		args = append(args, toText(v, typ))
		return fmt.Sprintf("$%d::text::%s", len(args), typ)
	}
	where := []string{"tenant_id = $1"}
	if t.soft {
		where = append(where, "deleted_at IS NULL")
	}
	where = append(where, t.filterWhere(q.in.Filter, arg)...)
	similarTo := "q.words OPERATOR(" + q.trgm + ".<%) "
	for i, w := range q.words {
		args = append(args, prefixes[i])
		prefix, word := fmt.Sprintf("to_tsquery($4::regconfig, $%d)", len(args)), ""
		if typos {
			args = append(args, w)
			word = fmt.Sprintf("$%d::text", len(args))
		}
		var any []string
		for _, f := range q.readable {
			any = append(any, pgx.Identifier{f.vector}.Sanitize()+" @@ "+prefix)
			if typos {
				any = append(any, word+" OPERATOR("+q.trgm+".<%) "+f.col)
			}
		}
		where = append(where, "("+strings.Join(any, " OR ")+")")
	}
	var vectors, similar, heads []string
	for _, f := range q.readable {
		vec := pgx.Identifier{f.vector}.Sanitize()
		vectors = append(vectors, vec)
		matched := vec + " @@ q.q"
		if typos {
			// A typo match ranks by its similarity, scaled like ts_rank's
			// weights.
			similar = append(similar, fmt.Sprintf("CASE WHEN %s @@ q.q THEN 0 ELSE %s.word_similarity(q.words, coalesce(%s, '')) * %s END",
				vec, q.trgm, f.col, weightScale(f.weight)))
			matched += " OR " + similarTo + f.col
		}
		heads = append(heads, fmt.Sprintf(`CASE WHEN %s
	THEN ts_headline(q.config, %s, q.q, 'StartSel="`+markStart+`", StopSel="`+markStop+`", MaxWords=24, MinWords=8') END`,
			matched, f.col))
	}
	rank := fmt.Sprintf("ts_rank(%s, q.q)::real", strings.Join(vectors, " || "))
	if typos {
		rank = fmt.Sprintf("(ts_rank(%s, q.q) + greatest(%s))::real", strings.Join(vectors, " || "), strings.Join(similar, ", "))
	}
	after := ""
	if cur != nil {
		r, id := arg(cur.Rank, "real"), arg(cur.ID.String(), "uuid")
		after = fmt.Sprintf("WHERE rank < %s OR (rank = %s AND id > %s)", r, r, id)
	}
	// The page is found first; only its rows get snippets.
	sql := fmt.Sprintf(`WITH q AS (SELECT to_tsquery($4::regconfig, $2) AS q, $3::text AS words, $4::regconfig AS config)
SELECT %s, rank, %s FROM (
	SELECT * FROM (SELECT %s.*, %s AS rank FROM %s, q WHERE %s) hits %s ORDER BY rank DESC, id LIMIT %d
) page, q ORDER BY rank DESC, id`,
		t.selectList, strings.Join(heads, ", "), t.table, rank, t.table, strings.Join(where, " AND "), after, q.in.Limit+1)
	if !typos {
		rows, err := s.pool.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return t.scanHits(rows, q.readable)
	}
	var hits []SearchHit
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		batch.Queue(`SELECT set_config('pg_trgm.word_similarity_threshold', '` + typoThreshold + `', true)`)
		batch.Queue(sql, args...)
		br := tx.SendBatch(ctx, batch)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		r, err := br.Query()
		if err != nil {
			return err
		}
		hits, err = t.scanHits(r, q.readable)
		return err
	})
	return hits, err
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

// scanHits reads the rows of a search: the row's columns, its rank, then
// one headline per readable searchable field.
func (t *Entity) scanHits(rows pgx.Rows, fields []searchField) ([]SearchHit, error) {
	defer rows.Close()
	var out []SearchHit
	n := len(rows.FieldDescriptions())
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		rowCols := n - 1 - len(fields)
		hit := SearchHit{Row: t.rowOf(vals[:rowCols]), Highlights: map[string]string{}}
		if r, ok := vals[rowCols].(float32); ok {
			hit.Rank = float64(r)
		}
		for i, f := range fields {
			if s, ok := vals[rowCols+1+i].(string); ok && strings.Contains(s, markStart) {
				hit.Highlights[f.name] = markReplacer.Replace(html.EscapeString(strings.TrimSpace(s)))
			}
		}
		out = append(out, hit)
	}
	return out, rows.Err()
}
