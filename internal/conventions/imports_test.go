package conventions_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/phaseshift/phaseshift"

// goFiles calls fn with every .go file of the repository (testdata and
// hidden directories aside), parsed for its imports and declarations, and
// its path from the repository's root, slash-separated.
func goFiles(t *testing.T, fn func(rel string, f *ast.File)) {
	t.Helper()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		require.NoError(t, err, path)
		rel, err := filepath.Rel(root, path)
		require.NoError(t, err)
		fn(filepath.ToSlash(rel), f)
		return nil
	})
	require.NoError(t, err)
}

// upper is what a package of each lower layer must not import: the layers
// run internal (the engine and its seams), checkpoint and source, migrate,
// metrics and migrate/control, and last cmd and examples (DESIGN.md). (Issue 37: the command, under
// checkpoint, imported migrate/control, a higher layer's package, and
// reached the engine through hooks that checkpoint set in init functions.)
var upper = map[string][]string{
	"internal/":   {"/checkpoint", "/source/", "/migrate", "/metrics", "/cmd/", "/examples/"},
	"checkpoint/": {"/source/", "/migrate", "/metrics", "/cmd/", "/examples/"},
	"source/":     {"/migrate", "/metrics", "/cmd/", "/examples/"},
	"migrate/":    {"/metrics", "/cmd/", "/examples/"},
	"metrics/":    {"/cmd/", "/examples/"},
}

// TestImportsRunDownward: no production file of a lower layer imports a
// higher one (checkpoint/checkpointtest and migrate/migratetest are
// production code too: users import them); test files may, since they test
// the layers together (internal/robustness and internal/bench are all
// tests but their file systems and references).
func TestImportsRunDownward(t *testing.T) {
	checked := 0
	goFiles(t, func(rel string, f *ast.File) {
		if strings.HasSuffix(rel, "_test.go") {
			return
		}
		for layer, banned := range upper {
			if !strings.HasPrefix(rel, layer) {
				continue
			}
			if layer == "migrate/" && !strings.HasPrefix(rel, "migrate/control/") {
				// migrate/control stands beside metrics, above migrate.
				banned = append(slices.Clone(banned), "/migrate/control")
			}
			checked++
			for _, imp := range f.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				rest, ok := strings.CutPrefix(path, module)
				if !ok {
					continue
				}
				for _, b := range banned {
					assert.False(t, strings.HasPrefix(rest+"/", b) || strings.HasPrefix(rest, b),
						"%s imports %s: imports run downward (internal, checkpoint and source, migrate, metrics, cmd and examples)", rel, path)
				}
			}
		}
	})
	assert.Greater(t, checked, 50, "the walk found the layers' files")
}

// TestNothingImportsTheCommand: cmd/phaseshift is a main package; nothing
// imports it, and its tests build it as a binary.
func TestNothingImportsTheCommand(t *testing.T) {
	goFiles(t, func(rel string, f *ast.File) {
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			assert.False(t, strings.HasPrefix(path, module+"/cmd/"), "%s imports %s", rel, path)
		}
	})
}

// TestNoInitSetsAHook: no package has an init function. The engine's
// entry points for the command and the test kits are plain functions of
// internal/engine; an init that set a package variable of another package
// made go-to-definition land on a nil var and the hook depend on who
// imported whom (issue 37).
func TestNoInitSetsAHook(t *testing.T) {
	goFiles(t, func(rel string, f *ast.File) {
		if strings.HasSuffix(rel, "_test.go") {
			return
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "init" {
				assert.Fail(t, "an init function", "%s has func init(): call a plain function instead", rel)
			}
		}
	})
}

// TestNoLibraryFileIsLong: no production file of the library (every
// package but the examples, which are programs to read whole) is over 500
// lines, so that each reads as one job (issue 37: the journal's file was
// 854 lines with seven jobs, the disk's 858).
func TestNoLibraryFileIsLong(t *testing.T) {
	const most = 500
	goFiles(t, func(rel string, f *ast.File) {
		if strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "examples/") {
			return
		}
		data, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(rel)))
		require.NoError(t, err)
		lines := bytes.Count(data, []byte("\n"))
		assert.LessOrEqual(t, lines, most, "%s has %d lines: split it by job", rel, lines)
	})
}
