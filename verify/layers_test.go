package verify

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/goshmem/goshmem"

// The layering of architecture.md: heap and netmesh never import shmem
// nor each other (netmesh's view of the segment is an interface shmem
// wires to heap); ring and collective reach the runtime only through
// shmem. internal/testhook and internal/elemkind are the internal
// packages any layer may import: the first holds tests' hooks (one
// atomic load each while unset), the second one pure function (an
// element type's kind, which ring's wire header and collective's
// reductions both need); neither is part of the runtime nor imports
// anything of the module.
func TestImportRules(t *testing.T) {
	forbidden := map[string][]string{
		"heap":       {"shmem", "netmesh", "ring", "collective"},
		"netmesh":    {"shmem", "heap", "ring", "collective"},
		"ring":       {"heap", "netmesh", "internal"},
		"collective": {"heap", "netmesh", "internal", "ring"},
	}
	for pkg, bad := range forbidden {
		files, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if path == module+"/internal/testhook" || path == module+"/internal/elemkind" {
					continue
				}
				for _, b := range bad {
					if path == module+"/"+b || strings.HasPrefix(path, module+"/"+b+"/") {
						t.Errorf("%s imports %s: the %s layer must not depend on %s", f, path, pkg, b)
					}
				}
			}
		}
	}
}
