package projection

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/feature"
)

// EnsureSchema creates the read tables of every entity and inline projection
// that do not exist yet and adds columns that were declared since (the
// executor's own tables are Migrate's), and keeps the search columns and
// indexes of the searchable ones as declared. It runs in one transaction
// under an advisory lock, so N processes may boot at once. Declared columns
// are never dropped or retyped: that is a projection rebuild.
//
// A projection table it creates while events the projection applies exist
// already (a projection added to an app with history) lacks them: queries
// of it answer projection_rebuild_in_progress until it is complete — for an
// inline projection after RebuildProjection, for a multi-stream projection
// reading from the beginning once its consumer has passed those events.
func (s *Side) EnsureSchema(ctx context.Context) error {
	var tables []ensureTable
	for _, e := range s.reg.Entities() {
		tables = append(tables, ensureTable{def: e.Table()})
	}
	for _, p := range s.reg.Projections() {
		tables = append(tables, ensureTable{def: p.Table(), projection: p.Name()})
	}
	for _, m := range s.reg.MSPs() {
		if t, ok := m.Table(); ok {
			et := ensureTable{def: t}
			if m.StartFrom() == feature.FromBeginning {
				et.projection = m.Name()
			}
			tables = append(tables, et)
		}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('kumiko.tables.' || $1, 0))`, s.schema); err != nil {
			return err
		}
		for _, t := range tables {
			if t.projection != "" {
				if err := s.markIfIncomplete(ctx, tx, t); err != nil {
					return fmt.Errorf("table %s: %w", t.def.Name, err)
				}
			}
			for _, stmt := range s.tableDDL(t.def) {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("table %s: %w", t.def.Name, err)
				}
			}
		}
		for _, e := range s.reg.Entities() {
			if err := s.ensureSearch(ctx, tx, s.entities[e.Name()]); err != nil {
				return err
			}
		}
		for _, ts := range s.tableSearches() {
			if err := s.ensureSearchOf(ctx, tx, ts.name, ts.table, ts.config, ts.fields); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ensure read tables: %w", err)
	}
	// After the commit: a consumer reset waits for the consumer's passes,
	// which read the read tables this transaction held locked.
	return s.ensureEngines(ctx)
}

// ensureTable is a read table EnsureSchema keeps.
type ensureTable struct {
	def feature.TableDef
	// projection names the projection that fills the table from the
	// events already stored; "" for entity tables and projections that
	// start with the events after them.
	projection string
}

// markIfIncomplete records a projection table about to be created while
// events it applies exist: the table lacks every event up to their head.
func (s *Side) markIfIncomplete(ctx context.Context, tx pgx.Tx, t ensureTable) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.qualify(t.def.Name)).Scan(&exists); err != nil || exists {
		return err
	}
	target, err := s.rebuildTarget(t.projection)
	if err != nil {
		return err
	}
	head, err := s.store.HeadTx(ctx, tx, target.filter())
	if err != nil || head == 0 {
		return err
	}
	_, err = tx.Exec(ctx, s.sql.markIncomplete, t.projection, head)
	return err
}

// tableDDL is the idempotent DDL of a read table.
func (s *Side) tableDDL(t feature.TableDef) []string {
	name := s.qualify(t.Name)
	var cols []string
	for _, c := range t.Columns {
		cols = append(cols, columnDDL(c))
	}
	if len(t.PrimaryKey) > 0 {
		cols = append(cols, "PRIMARY KEY ("+idents(t.PrimaryKey)+")")
	}
	stmts := []string{fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n\t%s\n)", name, strings.Join(cols, ",\n\t"))}
	for _, c := range t.Columns {
		// A column declared after the table was created: nullable, so
		// existing rows stay valid until the projection is rebuilt.
		c.NotNull = false
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s", name, columnDDL(c)))
	}
	for _, ix := range t.Indexes {
		unique := ""
		if ix.Unique {
			unique = "UNIQUE "
		}
		ixName := pgx.Identifier{t.Name + "_" + strings.Join(ix.Columns, "_") + "_idx"}.Sanitize()
		stmts = append(stmts, fmt.Sprintf("CREATE %sINDEX IF NOT EXISTS %s ON %s (%s)", unique, ixName, name, idents(ix.Columns)))
	}
	return stmts
}

func columnDDL(c feature.Column) string {
	s := pgx.Identifier{c.Name}.Sanitize() + " " + c.Type
	if c.NotNull {
		s += " NOT NULL"
	}
	return s
}

func idents(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(out, ", ")
}

func (s *Side) qualify(table string) string {
	return pgx.Identifier{s.schema, table}.Sanitize()
}
