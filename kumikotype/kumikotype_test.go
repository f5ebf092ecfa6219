package kumikotype_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kumiko-go/kumiko/kumikotype"
)

// Every code has a title and its status; an unknown code is a 500 with no
// title.
func TestCodes(t *testing.T) {
	want := map[kumikotype.Code]int{
		kumikotype.CodeValidation: 400, kumikotype.CodeUnauthenticated: 401, kumikotype.CodeAccessDenied: 403,
		kumikotype.CodeNotFound: 404, kumikotype.CodeMethodNotAllowed: 405, kumikotype.CodeVersionConflict: 409,
		kumikotype.CodeStreamArchived: 409, kumikotype.CodeUniqueViolation: 409, kumikotype.CodeIdempotencyConflict: 409,
		kumikotype.CodeUnprocessable: 422, kumikotype.CodePayloadTooLarge: 413, kumikotype.CodeUnsupportedMediaType: 415,
		kumikotype.CodeRateLimited: 429, kumikotype.CodeClientClosed: 499, kumikotype.CodeUnavailable: 503,
		kumikotype.CodeProjectionRebuilding: 503, kumikotype.CodeInternal: 500,
	}
	require.Len(t, kumikotype.Codes(), len(want))
	for _, c := range kumikotype.Codes() {
		require.Equal(t, want[c], c.Status(""), c)
		require.NotEmpty(t, c.Title(), c)
	}
	require.Equal(t, http.StatusUnprocessableEntity, kumikotype.CodeIdempotencyConflict.Status(string(kumikotype.ReasonKeyReused)))
	require.Equal(t, http.StatusInternalServerError, kumikotype.Code("no_such_code").Status(""))
	require.Empty(t, kumikotype.Code("no_such_code").Title())
}

func TestProblemWrite(t *testing.T) {
	p := kumikotype.NewProblem(kumikotype.CodeNotFound, "", "nothing here")
	require.Equal(t, kumikotype.Problem{Type: "https://kumiko.dev/problems/not_found", Title: "Not found", Status: 404,
		Code: "not_found", Reason: "not_found", Detail: "nothing here"}, p)
	rec := httptest.NewRecorder()
	require.NoError(t, p.Write(rec))
	require.Equal(t, 404, rec.Code)
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var got map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
	require.Equal(t, map[string]any{"type": "https://kumiko.dev/problems/not_found", "title": "Not found", "status": float64(404),
		"code": "not_found", "reason": "not_found", "detail": "nothing here", "requestId": ""}, got)
}

// The one error type: its text leaves out what is empty, its status
// follows code and reason, and its cause unwraps.
func TestError(t *testing.T) {
	cause := errors.New("deep cause")
	e := kumikotype.NewError(kumikotype.CodeIdempotencyConflict, kumikotype.ReasonKeyReused, "the key was used before", cause).
		With("key", "k1").WithFields([]kumikotype.FieldError{{Path: "a", Code: "required", Message: "is required"}})
	require.Equal(t, "idempotency_conflict (key_reused): the key was used before: deep cause", e.Error())
	require.Equal(t, http.StatusUnprocessableEntity, e.Status())
	require.Equal(t, map[string]any{"key": "k1"}, e.Details())
	require.Len(t, e.Fields(), 1)
	require.ErrorIs(t, e, cause)

	bare := kumikotype.NewError(kumikotype.CodeNotFound, "", "", nil)
	require.Equal(t, "not_found", bare.Error())
	require.Equal(t, "not_found", bare.Reason())
	require.Equal(t, http.StatusNotFound, bare.Status())
	require.Nil(t, bare.Details())
	require.ErrorIs(t, bare.WithCause(cause), cause)
}

// constValues parses the package's own source and returns the value of
// every constant declared with the named type, by constant name.
func constValues(t *testing.T, typeName string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	out := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typeName {
					continue
				}
				require.Len(t, vs.Values, len(vs.Names), "%s: a %s constant needs its own literal value", fset.Position(vs.Pos()), typeName)
				for i, n := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					require.True(t, ok && lit.Kind == token.STRING, "%s: %s is not a string literal", fset.Position(n.Pos()), n.Name)
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					out[n.Name] = v
				}
			}
		}
	}
	return out
}

// No two reasons, and no two field problem codes, share a wire string:
// a client could not tell them apart.
func TestReasonsAreDistinct(t *testing.T) {
	for _, typ := range []string{"Reason", "FieldCode"} {
		consts := constValues(t, typ)
		require.NotEmpty(t, consts, typ)
		byValue := map[string]string{}
		for _, name := range slices.Sorted(maps.Keys(consts)) {
			v := consts[name]
			require.NotEmpty(t, v, name)
			if other, dup := byValue[v]; dup {
				t.Errorf("%s and %s are both %q", other, name, v)
			}
			byValue[v] = name
		}
	}
	require.Equal(t, "key_reused", string(kumikotype.ReasonKeyReused))
	require.Equal(t, "required", string(kumikotype.FieldCodeRequired))
}

// reasonArg is the position of the reason argument of each error builder
// of the contract; a call of one of these names anywhere passes a Reason
// constant (or "", for the code itself), never a bare string.
var reasonArg = map[string]int{
	"NewError":        1, // kumikotype.NewError(code, reason, detail, cause)
	"newError":        1, // the packages' newError(code, reason, detail, cause)
	"NewProblem":      1, // kumikotype.NewProblem(code, reason, detail)
	"notFoundf":       0, // pipeline's notFoundf(reason, format, args...)
	"newAPIError":     1, // http's newAPIError(code, reason, detail)
	"invalidInput":    0, // http's invalidInput(reason, detail, fields...)
	"unauthenticated": 0, // http's unauthenticated(reason, detail, cause)
	"problem":         2, // the console's problem(w, code, reason, detail)
	"refused":         2, // the console's refused(w, code, reason, detail)
}

// Every reason the code answers is a kumikotype constant: no call of an
// error builder passes a string literal as the reason, no composite
// literal sets a Reason (or reason) field to one, and no Reason method
// returns one. The wire strings are spelled once, in this package.
func TestNoBareReasons(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var bad []string
	nonEmptyString := func(e ast.Expr) bool {
		for {
			p, ok := e.(*ast.ParenExpr)
			if !ok {
				break
			}
			e = p.X
		}
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
		v, err := strconv.Unquote(lit.Value)
		return err != nil || v != ""
	}
	scanned := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" ||
				rel == "kumikotype") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		scanned++
		at := func(n ast.Node, what string) {
			p := fset.Position(n.Pos())
			bad = append(bad, fmt.Sprintf("%s:%d: %s", rel, p.Line, what))
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				var name string
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				if i, ok := reasonArg[name]; ok && i < len(n.Args) && nonEmptyString(n.Args[i]) {
					at(n.Args[i], name+" with a bare reason")
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && (k.Name == "Reason" || k.Name == "reason") && nonEmptyString(n.Value) {
					at(n.Value, "a bare reason in a composite literal")
				}
			case *ast.FuncDecl:
				if n.Name.Name != "Reason" || n.Body == nil {
					return true
				}
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if r, ok := m.(*ast.ReturnStmt); ok {
						for _, e := range r.Results {
							if nonEmptyString(e) {
								at(e, "Reason returns a bare reason")
							}
						}
					}
					return true
				})
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, scanned, 100, "the scan found too few files; is the root %s right?", root)
	if len(bad) > 0 {
		t.Fatalf("use a kumikotype.Reason constant (add one in kumikotype/reason.go if it is new):\n%s", strings.Join(bad, "\n"))
	}
}
