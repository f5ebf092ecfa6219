package layout_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/kumiko-go/kumiko/"

// forbidden lists, per package, the framework packages it must not import
// (directly; the build forbids the cycles that would import them through
// another).
var forbidden = map[string][]string{
	// The dispatcher knows the event store only: the executor turns its
	// own multi-stream projections into consumers.
	"consumer":   {"pipeline", "registry", "http", "kumiko", "cli", "internal/ops"},
	"eventstore": {"feature", "registry", "pipeline", "consumer", "http", "kumiko", "cli", "internal/ops"},
	"pipeline":   {"http", "kumiko", "cli", "internal/ops"},
	// The read side knows the store and the registry; the pipeline hands it
	// what runs a multi-stream projection's apply (projection.ApplyMSP).
	"internal/projection": {"pipeline", "integration", "jobs", "http", "kumiko", "cli", "internal/ops"},
	// Integration events sit on the executor; the facade wires them.
	"integration": {"http", "kumiko", "cli", "internal/ops"},
	// Jobs know the dispatcher and the event store; the executor turns the
	// registry's jobs into jobs.Job values and runs their handlers.
	"jobs": {"pipeline", "registry", "http", "kumiko", "cli", "internal/ops"},
	// The shared vocabulary and the stream writer are the bottom: they
	// import nothing of kumiko.
	"kumikotype":   {"feature", "registry", "eventstore", "consumer", "pipeline", "integration", "jobs", "lock", "idempotency", "console", "http", "kumiko", "cli", "internal/ops"},
	"internal/sse": {"feature", "registry", "eventstore", "consumer", "pipeline", "integration", "jobs", "lock", "idempotency", "console", "http", "kumiko", "cli", "internal/ops", "kumikotype"},
	// A job's settings contract is shared by the registry and the runner:
	// it imports nothing of kumiko.
	"internal/jobspec": {"feature", "registry", "eventstore", "consumer", "pipeline", "integration", "jobs", "lock", "idempotency", "console", "http", "kumiko", "cli", "internal/ops", "kumikotype"},
	// Filling authors' structs from maps is a tool of the DSL's: it imports
	// nothing of kumiko.
	"internal/structmap": {"feature", "registry", "eventstore", "consumer", "pipeline", "integration", "jobs", "lock", "idempotency", "console", "http", "kumiko", "cli", "internal/ops", "kumikotype"},
	// The search engine contract stands on its own; the SQL of search in a
	// table knows only it.
	"search":             {"feature", "registry", "eventstore", "consumer", "pipeline", "integration", "jobs", "lock", "idempotency", "console", "http", "kumiko", "cli", "internal/ops", "kumikotype", "internal/projection"},
	"internal/searchsql": {"feature", "registry", "eventstore", "consumer", "pipeline", "integration", "jobs", "lock", "idempotency", "console", "http", "kumiko", "cli", "internal/ops", "kumikotype", "internal/projection"},
	// Locks stand on their own.
	"lock": {"feature", "registry", "eventstore", "consumer", "pipeline", "jobs", "http", "kumiko", "cli", "internal/ops"},
}

func TestPackagesImportOnlyDownwards(t *testing.T) {
	for pkg, banned := range forbidden {
		files, err := filepath.Glob(filepath.Join("../..", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", pkg)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range banned {
					if path == module+b {
						t.Errorf("%s imports %s", filepath.ToSlash(f), path)
					}
				}
			}
		}
	}
}
