package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/internal/launch"
)

// Every example, run through goshrun as real processes, checks its own
// answer and exits 0; SHMEM_INFO makes PE 0 print the configuration.
func TestExamples(t *testing.T) {
	for _, ex := range []string{"hello", "pi", "ring", "histogram", "heat", "stats", "pipeline"} {
		bin, cleanup, err := launch.Build("../../examples/" + ex)
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup()
		for _, n := range []int{1, 3, 4} {
			t.Run(fmt.Sprintf("%s/%d", ex, n), func(t *testing.T) {
				code, out, errOut := goshrun(t, "-n", fmt.Sprint(n), "--timeout", "2m", "--tag-output", bin)
				if code != 0 {
					t.Fatalf("exit %d\n%s%s", code, out, errOut)
				}
			})
		}
	}
}

func TestInfo(t *testing.T) {
	code, out, errOut := goshrun(t, "-n", "2", "--env", "SHMEM_INFO=1", "--env", "SHMEM_VERSION=1", "../../examples/hello")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"goshmem", "PE 0 of 2", "symmetric heap", "cache line", "route to PE 1: shm"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("SHMEM_INFO output lacks %q:\n%s", want, errOut)
		}
	}
}
