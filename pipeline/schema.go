package pipeline

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/kumiko-go/kumiko/feature"
)

// EnsureSchema creates the read tables of every entity and inline projection
// that do not exist yet and adds columns that were declared since (the
// executor's own tables are Migrate's). It runs in one transaction under an
// advisory lock, so N processes may boot at once. Columns
// are never dropped or retyped: that is a projection rebuild.
func (d *Executor) EnsureSchema(ctx context.Context) error {
	var tables []feature.TableDef
	for _, e := range d.reg.Entities() {
		tables = append(tables, e.Table())
	}
	for _, p := range d.reg.Projections() {
		tables = append(tables, p.Table())
	}
	for _, m := range d.reg.MSPs() {
		if t, ok := m.Table(); ok {
			tables = append(tables, t)
		}
	}
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('kumiko.tables.' || $1, 0))`, d.schema); err != nil {
			return err
		}
		for _, t := range tables {
			for _, stmt := range d.tableDDL(t) {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return fmt.Errorf("table %s: %w", t.Name, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ensure read tables: %w", err)
	}
	return nil
}

// tableDDL is the idempotent DDL of a read table.
func (d *Executor) tableDDL(t feature.TableDef) []string {
	name := d.qualify(t.Name)
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

func (d *Executor) qualify(table string) string {
	return pgx.Identifier{d.schema, table}.Sanitize()
}
