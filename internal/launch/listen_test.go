package launch

import (
	"context"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

// A wildcard rendezvous address would be published as is and send every
// PE to itself: it is refused before anything starts.
func TestWildcardRendezvousRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "nonsense"} {
		j := &Job{N: 1, Program: "true", Listen: addr}
		code, err := j.Run(context.Background())
		if !errors.Is(err, errs.Invalid) || code != CodeFailure {
			t.Errorf("Listen %q: code %d, err %v; want a refusal", addr, code, err)
		}
	}
}
