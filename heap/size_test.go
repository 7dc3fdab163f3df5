package heap

import (
	"errors"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

func TestParseSize(t *testing.T) {
	good := map[string]uint64{
		"0": 0, "1024": 1024, "512B": 512, "64K": 64 << 10, "64k": 64 << 10, "64M": 64 << 20,
		"64MB": 64 << 20, "64MiB": 64 << 20, "2G": 2 << 30, "1T": 1 << 40, ".5G": 512 << 20,
		"1.5m": 3 << 19, " 8M ": 8 << 20, "0.25K": 256,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", ".", "12X", "-1M", "1e3", "NaN", "inf", "1.2.3M", "64 M", "0x10", "1MM", "1iB", "99999999999T"} {
		if got, err := ParseSize(in); !errors.Is(err, errs.Invalid) {
			t.Errorf("ParseSize(%q) = %d, %v; want errs.Invalid", in, got, err)
		}
	}
}
