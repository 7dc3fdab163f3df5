package shmem

import (
	"fmt"

	"github.com/goshmem/goshmem/internal/errs"
)

// The sentinel errors of goshmem. Every error the package returns wraps
// one of them (compare with errors.Is) together with the numbers that
// explain it.
var (
	ErrBadPE         = errs.BadPE         // a PE number outside the job or team
	ErrOutOfBounds   = errs.OutOfBounds   // past the end of a symmetric object, or a freed object
	ErrHeapExhausted = errs.HeapExhausted // no room in the symmetric heap
	ErrAsymmetric    = errs.Asymmetric    // PEs disagreed on a collective call
	ErrPeerLost      = errs.PeerLost      // a PE died or its link broke
	ErrTimeout       = errs.Timeout       // a wait on other PEs passed the timeout
	ErrFinalized     = errs.Finalized     // the PE, context or team is closed
	ErrAuth          = errs.Auth          // a peer without the job key
	ErrProtocol      = errs.Protocol      // malformed bytes from the wire or shared memory
	ErrInvalid       = errs.Invalid       // a malformed argument (negative count, bad stride, bad option)
)

// ExitError is what Run returns when a PE called GlobalExit: the job ended
// with Code.
type ExitError struct {
	PE   int
	Code int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("shmem: PE %d called GlobalExit(%d)", e.PE, e.Code)
}
