package conventions_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSentinelsHaveNoPackagePrefix: every package's sentinel errors are
// short lowercase messages without the package's name as a prefix, as
// bbolt's errors/errors.go has them ("database not open"); the return site
// that wraps one says where it comes from ("checkpoint: %w: ...", "cri:
// %w: ..."), so that a message names its package once. (Issue 25, item 8:
// checkpoint.ErrInvalidOption was "checkpoint: invalid option" where its
// siblings were "checkpoint is corrupt", and cri's, hostlocal's, metrics'
// and control's all carried their prefix.)
func TestSentinelsHaveNoPackagePrefix(t *testing.T) {
	prefix := regexp.MustCompile(`^[a-z][a-z0-9]*: `)
	found := 0
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for name, msg := range sentinels(t, path) {
			found++
			assert.NotRegexp(t, prefix, msg, "%s: %s: a sentinel's text carries no package prefix", path, name)
			assert.Equal(t, strings.ToLower(msg[:1]), msg[:1], "%s: %s: a sentinel's text starts lower case", path, name)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, found, 40, "the walk found the repository's sentinels")
}

// sentinels returns the package-level errors.New sentinels of the file at
// path, by name.
func sentinels(t *testing.T, path string) map[string]string {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err, path)
	out := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !n.IsExported() || !strings.HasPrefix(n.Name, "Err") || i >= len(vs.Values) {
					continue
				}
				if msg, ok := errorsNew(vs.Values[i]); ok {
					out[n.Name] = msg
				}
			}
		}
	}
	return out
}

// errorsNew returns the message of errors.New("message").
func errorsNew(e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "New" {
		return "", false
	}
	if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "errors" {
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok {
		return "", false
	}
	msg, err := strconv.Unquote(lit.Value)
	return msg, err == nil && msg != ""
}
