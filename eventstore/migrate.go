package eventstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
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
	entries, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		panic(err) // the pattern is a constant
	}
	var ms []Migration
	for _, path := range entries {
		base := strings.TrimSuffix(strings.TrimPrefix(path, "migrations/"), ".sql")
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			panic(fmt.Sprintf("eventstore: migration %s has no version prefix", path))
		}
		body, _ := migrationFiles.ReadFile(path)
		ms = append(ms, Migration{Version: v, Name: name, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms
}

// Migrate brings the store's schema to the newest embedded version and returns
// the versions it applied. It runs in one transaction under an advisory lock,
// so any number of processes may call it at once: one applies, the others wait
// and find nothing left to do. A database migrated by a newer binary is refused.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	return migrate(ctx, s, Migrations())
}

func migrate(ctx context.Context, s *Store, ms []Migration) (applied []int, err error) {
	schema := pgx.Identifier{s.cfg.Schema}.Sanitize()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('kumiko.migrate.' || $1, 0))`, s.cfg.Schema); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.kumiko_schema_migrations (
			version integer PRIMARY KEY,
			name text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("bookkeeping table: %w", err)
		}
		var newest int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0) FROM `+schema+`.kumiko_schema_migrations`).Scan(&newest); err != nil {
			return fmt.Errorf("read version: %w", err)
		}
		if len(ms) > 0 && newest > ms[len(ms)-1].Version {
			return fmt.Errorf("schema %s is at version %d, newer than this binary knows (%d)", s.cfg.Schema, newest, ms[len(ms)-1].Version)
		}
		for _, m := range ms {
			if m.Version <= newest {
				continue
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, "{{schema}}", schema)); err != nil {
				return fmt.Errorf("apply %d_%s: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.kumiko_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
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
