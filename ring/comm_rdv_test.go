package ring

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// comm-rdv-many: no limit on how many rendezvous messages are in flight.
// 100 goroutines of PE 0 each Send a message longer than the eager limit
// with a tag of its own (k); PE 1 receives them in reverse tag order, so
// its first receive waits for the message sent last. Every Send must be
// announced while the others wait for their receives. The deadline only
// turns a hang into an error.
var _ = register("comm-rdv-many", func(pe *shmem.PE) error {
	c, err := NewComm(pe.World())
	if err != nil {
		return err
	}
	const count = 100
	ctx, cancel := context.WithTimeout(bg(), 30*time.Second)
	defer cancel()
	size := func(k int) int { return c.EagerLimit() + 1 + k*37 }
	switch c.Rank() {
	case 0:
		var wg sync.WaitGroup
		errs := make(chan error, count)
		for k := range count {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := Send(ctx, c, 1, k, fillMsg(make([]byte, size(k)), 0, k, k)); err != nil {
					errs <- fmt.Errorf("Send tag %d: %w", k, err)
				}
			}()
		}
		if err := firstErr(&wg, errs); err != nil {
			return err
		}
	case 1:
		dst := make([]byte, size(count))
		for k := count - 1; k >= 0; k-- {
			st, err := Recv(ctx, c, 0, k, dst)
			if err != nil {
				return fmt.Errorf("Recv tag %d (after %d received): %w", k, count-1-k, err)
			}
			if st.Bytes != size(k) || st.Tag != k {
				return fmt.Errorf("Recv tag %d: %+v", k, st)
			}
			if err := checkMsg(dst[:st.Bytes], 0, k, k); err != nil {
				return err
			}
		}
	}
	return closeComm(pe, c)
})

func TestCommRdvMany(t *testing.T) { each(t, "comm-rdv-many", 2) }
