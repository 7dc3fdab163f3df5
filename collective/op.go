package collective

import (
	"fmt"

	"github.com/goshmem/goshmem/shmem"
)

// Op is a reduction operator.
type Op int

// The reduction operators of OpenSHMEM. And, Or and Xor take integer
// types only; Min and Max take integer and floating-point types; Sum
// and Prod take every shmem.Elem type.
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	And
	Or
	Xor
)

func (op Op) String() string {
	switch op {
	case Sum:
		return "Sum"
	case Prod:
		return "Prod"
	case Min:
		return "Min"
	case Max:
		return "Max"
	case And:
		return "And"
	case Or:
		return "Or"
	case Xor:
		return "Xor"
	}
	return fmt.Sprintf("Op(%d)", int(op))
}

// opCheck says whether op applies to elements of kind k.
func opCheck(op Op, k kind) error {
	if op < Sum || op > Xor {
		return fmt.Errorf("collective: %v is not a reduction operator: %w", op, shmem.ErrInvalid)
	}
	switch {
	case k.isComplex() && op != Sum && op != Prod:
		return fmt.Errorf("collective: %v on %v elements (complex numbers take Sum and Prod only): %w", op, k, shmem.ErrInvalid)
	case k.isFloat() && op >= And:
		return fmt.Errorf("collective: %v on %v elements (bitwise operators take integer types only): %w", op, k, shmem.ErrInvalid)
	}
	return nil
}
