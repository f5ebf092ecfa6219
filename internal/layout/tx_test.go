package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// txMethods are the methods that make a type a transaction of pgx's.
var txMethods = []string{"Begin", "Commit", "Rollback", "Exec", "Query", "QueryRow", "SendBatch"}

// One transaction type: only eventstore wraps pgx's transaction. Elsewhere
// no struct embeds pgx.Tx and no type has the methods of one.
func TestOnlyTheEventStoreWrapsTransactions(t *testing.T) {
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || name == "eventstore" || strings.HasPrefix(name, ".") && path != "../.." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		methods := map[string]map[string]bool{}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok {
					for _, f := range st.Fields.List {
						if sel, ok := f.Type.(*ast.SelectorExpr); ok && len(f.Names) == 0 && sel.Sel.Name == "Tx" {
							if x, ok := sel.X.(*ast.Ident); ok && x.Name == "pgx" {
								t.Errorf("%s: %s embeds pgx.Tx: the one transaction type is eventstore.Tx", filepath.ToSlash(path), n.Name.Name)
							}
						}
					}
				}
			case *ast.FuncDecl:
				if n.Recv != nil && len(n.Recv.List) == 1 {
					typ := n.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						if methods[id.Name] == nil {
							methods[id.Name] = map[string]bool{}
						}
						methods[id.Name][n.Name.Name] = true
					}
				}
			}
			return true
		})
		for typ, ms := range methods {
			all := true
			for _, m := range txMethods {
				all = all && ms[m]
			}
			if all {
				t.Errorf("%s: %s has the methods of a pgx.Tx: the one transaction type is eventstore.Tx", filepath.ToSlash(path), typ)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
