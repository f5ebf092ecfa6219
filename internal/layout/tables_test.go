package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// owners maps each table of the framework to the package that owns it: the
// one whose migrations create it and whose queries.go holds its SQL.
var owners = map[string]string{
	"kumiko_events":              "eventstore",
	"kumiko_snapshots":           "eventstore",
	"kumiko_archived_streams":    "eventstore",
	"kumiko_schema_migrations":   "eventstore",
	"kumiko_pruned_types":        "eventstore",
	"kumiko_subject_keys":        "eventstore",
	"kumiko_key_checks":          "eventstore",
	"kumiko_event_consumers":     "consumer",
	"kumiko_consumer_migrations": "consumer",
	"kumiko_instances":           "consumer",
	"kumiko_consumer_stuck":      "consumer",
	"kumiko_consumer_members":    "consumer",
	"kumiko_consumer_parked":     "consumer",
	"kumiko_consumer_audit":      "consumer",
	// The read side's state: internal/projection's migrations create it
	// (pipeline.Migrate applies them with its own) and its SQL uses it.
	"kumiko_projections":            "internal/projection",
	"kumiko_projection_quarantine":  "internal/projection",
	"kumiko_idempotency_keys":       "pipeline",
	"kumiko_pipeline_migrations":    "pipeline",
	"kumiko_inbox":                  "integration",
	"kumiko_integration_dead":       "integration",
	"kumiko_integration_bindings":   "integration",
	"kumiko_integration_migrations": "integration",
}

// tolerated are the places outside a table's owner that still name it, each
// with the reason it is not moved yet. The test fails when one of them is
// gone, so the list only shrinks.
var tolerated = map[string]string{
	// A flag's help tells the operator where quarantined events go.
	"internal/ops/ops.go kumiko_projection_quarantine": "help text, not SQL",
}

// baselines are directories whose hand-written SQL is the point: the
// benchmarks' raw pgx baselines, run side by side with the framework.
var baselines = []string{"internal/bench"}

// No package but a table's owner names the table in a string literal of its
// non-test Go code (SQL, or a message quoting SQL), apart from the
// tolerated places above.
func TestTablesAreNamedOnlyByTheirOwners(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(owners))
	for name := range owners {
		names = append(names, regexp.QuoteMeta(name))
	}
	tableRE := regexp.MustCompile(`\b(` + strings.Join(names, "|") + `)\b`)
	found := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || slices.Contains(baselines, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgDir := filepath.ToSlash(filepath.Dir(rel))
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			for _, table := range tableRE.FindAllString(lit.Value, -1) {
				if pkgDir == owners[table] {
					continue
				}
				key := rel + " " + table
				if _, ok := tolerated[key]; ok {
					found[key] = true
					continue
				}
				t.Errorf("%s names %s, a table of %s: ask %s for it", rel, table, owners[table], owners[table])
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range slices.Sorted(maps.Keys(tolerated)) {
		if !found[key] {
			t.Errorf("%q no longer names the table: remove it from tolerated", key)
		}
	}
}

// Each table is created by a migration of its owner, in the owner's
// migrations directory, so that its DDL and its SQL live side by side.
func TestTablesAreCreatedByTheirOwners(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	createRE := regexp.MustCompile(`(?i)CREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:\{\{schema\}\}\.)?"?(kumiko_[a-z_]+)`)
	created := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() || !strings.HasSuffix(path, ".sql") || filepath.Base(filepath.Dir(path)) != "migrations" {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkgDir := filepath.ToSlash(filepath.Dir(filepath.Dir(rel)))
		for _, m := range createRE.FindAllStringSubmatch(string(body), -1) {
			table := m[1]
			owner, known := owners[table]
			switch {
			case !known:
				t.Errorf("%s creates %s, which has no owner in this test's owners", rel, table)
			case owner != pkgDir:
				t.Errorf("%s creates %s, a table of %s: move the migration there", rel, table, owner)
			}
			created[table] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range slices.Sorted(maps.Keys(owners)) {
		if !created[table] && !strings.HasSuffix(table, "_migrations") {
			t.Errorf("no migration creates %s", table)
		}
	}
}
