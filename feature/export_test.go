package feature

import "github.com/kumiko-go/kumiko/internal/spec"

// SpecOf is the definition f records, for the tests of the builders.
func SpecOf(f *Field) spec.Field { return f.spec.Clone() }
