package verify

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The protocol checks live beside the code they drive (they call its
// unexported functions and test-only hooks), so `go test ./verify/...`
// does not run them. What it does check: docs/verification.md's index
// lists exactly the TestExplore* functions there are, each under the
// package that holds it, so the page that says what is proved cannot
// drift from the checks (a check added, renamed or removed shows here).
func TestVerificationIndex(t *testing.T) {
	def := regexp.MustCompile(`(?m)^func (TestExplore\w*)\(t \*testing\.T\)`)
	have := map[string]string{} // test → package directory
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllSubmatch(b, -1) {
			rel, _ := filepath.Rel("..", filepath.Dir(path))
			have[string(m[1])] = filepath.ToSlash(rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(have) < 20 {
		t.Fatalf("found only %d TestExplore functions: %v", len(have), have)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "verification.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Index rows: | `package` | `TestExploreX` | ... |
	row := regexp.MustCompile("(?m)^\\| `([a-z/]+)` \\| `(TestExplore\\w*)` \\|")
	listed := map[string]string{}
	for _, m := range row.FindAllSubmatch(doc, -1) {
		listed[string(m[2])] = string(m[1])
	}
	var names []string
	for n := range have {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if p, ok := listed[n]; !ok {
			t.Errorf("%s (in %s) is not in docs/verification.md's index", n, have[n])
		} else if p != have[n] {
			t.Errorf("docs/verification.md's index puts %s in %s; it is in %s", n, p, have[n])
		}
	}
	for n, p := range listed {
		if _, ok := have[n]; !ok {
			t.Errorf("docs/verification.md's index lists %s in %s, which does not exist", n, p)
		}
	}
}
