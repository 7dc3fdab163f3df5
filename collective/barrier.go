package collective

import (
	"fmt"

	"github.com/goshmem/goshmem/shmem"
)

// Barrier completes this PE's outstanding puts, atomics and signals
// (Quiet), then waits until every member of t has reached the barrier
// (shmem_team_sync after shmem_quiet). It shares Team.Sync's barrier
// over the team's reserved flags (flat on a team of up to 16 members on
// one host, gather and release on a team of 3 to 8 members across
// hosts, dissemination otherwise), so barriers follow each other
// without a reset.
func Barrier(t *shmem.Team) error {
	if t == nil {
		return fmt.Errorf("collective: Barrier on a nil team: %w", shmem.ErrInvalid)
	}
	if err := t.PE().Quiet(); err != nil {
		return err
	}
	return t.Sync()
}
