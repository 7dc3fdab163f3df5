package heap

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

// FuzzParseSize: SHMEM_SYMMETRIC_SIZE comes from the user's environment.
// Any string parses to a size below 2^63 or fails with errs.Invalid,
// never a panic; a plain decimal number is that many bytes; a K suffix
// is 1024 times the number before it.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "64M", "64MiB", "1.5G", ".5g", "512B", " 8M ", "", ".", "x", "1e3", "-1K",
		"NaN", "99999999999T", "1.2.3M", "0x10", "18446744073709551615", "9223372036854775807B"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, errs.Invalid) {
				t.Fatalf("ParseSize(%q): %v does not wrap errs.Invalid", s, err)
			}
			return
		}
		if v >= 1<<63 {
			t.Fatalf("ParseSize(%q) = %d, not below 2^63", s, v)
		}
		num := strings.TrimSpace(s)
		if n, perr := strconv.ParseUint(num, 10, 64); perr == nil && n < 1<<53 && v != n {
			t.Fatalf("ParseSize(%q) = %d, want %d", s, v, n)
		}
		if _, perr := strconv.ParseUint(num, 10, 32); perr == nil {
			if k, kerr := ParseSize(num + "K"); kerr != nil || k != v<<10 {
				t.Fatalf("ParseSize(%qK) = %d, %v; want %d", num, k, kerr, v<<10)
			}
		}
	})
}
