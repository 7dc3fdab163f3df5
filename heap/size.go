package heap

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/goshmem/goshmem/internal/errs"
)

// ParseSize reads a size the way OpenSHMEM's SHMEM_SYMMETRIC_SIZE is
// written: a non-negative decimal number, possibly fractional (".5",
// "1.5"), optionally followed by one of the suffixes K, M, G, T (either
// case, powers of 1024), which may be followed by "B" or "iB" ("64M",
// "64MB", "64MiB" are all 64 MiB). A bare number may end in "B" ("512B").
// ".5G" is 512 MiB. The result is rounded down to a whole byte.
func ParseSize(s string) (uint64, error) {
	bad := func() (uint64, error) {
		return 0, fmt.Errorf("size %q: want a number with an optional K, M, G or T suffix: %w", s, errs.Invalid)
	}
	num := strings.ToUpper(strings.TrimSpace(s))
	mult := 1.0
	unit := strings.TrimLeft(num, "0123456789.")
	num = num[:len(num)-len(unit)]
	switch unit {
	case "", "B":
	case "K", "KB", "KIB":
		mult = 1 << 10
	case "M", "MB", "MIB":
		mult = 1 << 20
	case "G", "GB", "GIB":
		mult = 1 << 30
	case "T", "TB", "TIB":
		mult = 1 << 40
	default:
		return bad()
	}
	if num == "" || num == "." {
		return bad()
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || f < 0 {
		return bad()
	}
	v := f * mult
	if v >= 1<<63 {
		return 0, fmt.Errorf("size %q is too large: %w", s, errs.Invalid)
	}
	return uint64(v), nil
}
