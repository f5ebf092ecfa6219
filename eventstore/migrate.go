package eventstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one embedded schema change. Versions are dense from 1.
type Migration struct {
	Version int
	Name    string
	sql     string
}

// Migrations lists the embedded migrations in version order.
func Migrations() []Migration {
	ms, err := parseMigrations(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the files are embedded: a bad name fails every test
	}
	return ms
}

// parseMigrations reads the NNNN_name.sql files of dir in files, in version
// order.
func parseMigrations(files fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.Glob(files, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, p := range entries {
		base := strings.TrimSuffix(path.Base(p), ".sql")
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %s has no version prefix", p)
		}
		body, err := fs.ReadFile(files, p)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %d_%s: versions must be dense from 1", m.Version, m.Name)
		}
	}
	return ms, nil
}

// Migrate brings the store's schema to the newest embedded version and returns
// the versions it applied. It runs in one transaction under an advisory lock,
// so any number of processes may call it at once: one applies, the others wait
// and find nothing left to do. A database migrated by a newer binary is refused.
//
// The tables of the packages built on the store (the consumer dispatcher's,
// the executor's) are not the store's: their packages migrate them with
// MigrateOwned, after Migrate.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	return migrate(ctx, s, "kumiko_schema_migrations", Migrations())
}

// MigrateOwned applies the migrations of another package that owns tables in
// the store's schema: the files NNNN_name.sql (versions dense from 1) of dir
// in files, where {{schema}} stands for the quoted schema. owner names the
// package ([a-z]+); its versions are kept in a table of its own,
// kumiko_<owner>_migrations. It runs like Migrate — one transaction, under
// the same advisory lock, refusing a schema that a newer binary migrated —
// and returns the versions it applied. Call it after Migrate.
func (s *Store) MigrateOwned(ctx context.Context, owner string, files fs.FS, dir string) ([]int, error) {
	if owner == "" || strings.Trim(owner, "abcdefghijklmnopqrstuvwxyz") != "" {
		return nil, fmt.Errorf("migrate: owner %q must be lowercase letters", owner)
	}
	ms, err := parseMigrations(files, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", owner, err)
	}
	return migrate(ctx, s, "kumiko_"+owner+"_migrations", ms)
}

func migrate(ctx context.Context, s *Store, bookkeeping string, ms []Migration) (applied []int, err error) {
	schema := pgx.Identifier{s.cfg.Schema}.Sanitize()
	versions := schema + "." + pgx.Identifier{bookkeeping}.Sanitize()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlMigrateLock, s.cfg.Schema); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		if _, err := tx.Exec(ctx, strings.ReplaceAll(sqlMigrationsTable, "{{table}}", versions)); err != nil {
			return fmt.Errorf("bookkeeping table: %w", err)
		}
		var newest int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+versions).Scan(&newest); err != nil {
			return fmt.Errorf("read version: %w", err)
		}
		if len(ms) > 0 && newest > ms[len(ms)-1].Version {
			return fmt.Errorf("%s in schema %s is at version %d, newer than this binary knows (%d)", bookkeeping, s.cfg.Schema, newest, ms[len(ms)-1].Version)
		}
		for _, m := range ms {
			if m.Version <= newest {
				continue
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, "{{schema}}", schema)); err != nil {
				return fmt.Errorf("apply %d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+versions+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return fmt.Errorf("record %d_%s: %w", m.Version, m.Name, err)
			}
			applied = append(applied, m.Version)
		}
		return nil
	})
	if err != nil {
		return nil, TranslateError(fmt.Errorf("migrate: %w", err))
	}
	return applied, nil
}
