package doccheck_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../.."

// block is one ```go block of a Markdown file.
type block struct {
	file string
	line int
	text string
}

// goBlocks returns the ```go blocks of the Markdown files matching globs.
func goBlocks(t *testing.T, globs ...string) []block {
	t.Helper()
	var out []block
	for _, g := range globs {
		files, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var cur *block
			var lines []string
			for i, l := range strings.Split(string(raw), "\n") {
				switch {
				case cur == nil && strings.TrimSpace(l) == "```go":
					rel, _ := filepath.Rel(root, f)
					cur, lines = &block{file: filepath.ToSlash(rel), line: i + 1}, nil
				case cur != nil && strings.TrimSpace(l) == "```":
					cur.text = strings.Join(lines, "\n")
					out = append(out, *cur)
					cur = nil
				case cur != nil:
					lines = append(lines, l)
				}
			}
		}
	}
	return out
}

// normalise drops blank lines and each line's indentation.
func normalise(text string) []string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// goSources returns every Go file of the module (tests and examples
// included), normalised, by path.
func goSources(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out[path] = normalise(string(raw))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// contains reports whether want is a contiguous run of have.
func contains(have, want []string) bool {
	for i := 0; i+len(want) <= len(have); i++ {
		match := true
		for j := range want {
			if have[i+j] != want[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// Every Go block of the guides compiles: a whole file (it starts with its
// package clause) is built; any other block must be a quote of a Go file
// of the module, which the build and the tests compile.
func TestGoBlocksCompile(t *testing.T) {
	blocks := goBlocks(t, "docs/*.md", "samples/*/README.md")
	if len(blocks) == 0 {
		t.Fatal("no Go blocks found: the globs are wrong")
	}
	sources := goSources(t)
	for _, b := range blocks {
		if strings.Contains(b.text, "…") {
			t.Errorf("%s:%d: a Go block with an ellipsis does not compile; quote whole code", b.file, b.line)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(b.text), "package ") {
			if err := buildFile(t, b.text); err != nil {
				t.Errorf("%s:%d: does not build: %v", b.file, b.line, err)
			}
			continue
		}
		want := normalise(b.text)
		found := false
		for _, have := range sources {
			if contains(have, want) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s:%d: not a quote of any Go file of the module (blank lines and indentation aside):\n%s", b.file, b.line, b.text)
		}
	}
}

// buildFile type-checks and vets text as the only file of a package of
// the module.
func buildFile(t *testing.T, text string) error {
	t.Helper()
	pkg, err := os.MkdirTemp(".", "_build")
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = os.RemoveAll(pkg) })
	if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(text), 0o600); err != nil {
		return err
	}
	out, err := exec.Command("go", "vet", "./"+pkg).CombinedOutput()
	if err != nil {
		return &buildError{out: string(out)}
	}
	return nil
}

type buildError struct{ out string }

func (e *buildError) Error() string {
	var b strings.Builder
	s := bufio.NewScanner(strings.NewReader(e.out))
	for s.Scan() {
		b.WriteString("\n\t" + s.Text())
	}
	return b.String()
}
