package heap

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/goshmem/goshmem/internal/errs"
)

// ParseSize reads a size the way OpenSHMEM's SHMEM_SYMMETRIC_SIZE is
// written: a non-negative number, possibly fractional (".5", "1.5"),
// optionally followed by one of the suffixes K, M, G, T (either case,
// powers of 1024), optionally followed by "B" or "iB". "64M" is 64 MiB,
// ".5G" is 512 MiB. The result is rounded down to a whole byte.
func ParseSize(s string) (uint64, error) {
	in := s
	s = strings.TrimSpace(s)
	up := strings.ToUpper(s)
	up = strings.TrimSuffix(up, "IB")
	if strings.HasSuffix(up, "B") && len(up) > 1 && !isDigit(up[len(up)-2]) {
		up = up[:len(up)-1]
	}
	mult := 1.0
	if n := len(up); n > 0 {
		switch up[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			up = up[:n-1]
		}
	}
	if up == "" || strings.ContainsAny(up, "+-eEnNxX_ ") {
		return 0, fmt.Errorf("size %q: want a number with an optional K, M, G or T suffix: %w", in, errs.Invalid)
	}
	f, err := strconv.ParseFloat(up, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional K, M, G or T suffix: %w", in, errs.Invalid)
	}
	v := f * mult
	if v >= 1<<63 {
		return 0, fmt.Errorf("size %q is too large: %w", in, errs.Invalid)
	}
	return uint64(v), nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' || c == '.' }
