package shmem_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// Every duration and size the environment gives is range-checked, and a
// refused value is an error naming the variable (docs/env.md).
func TestEnvRanges(t *testing.T) {
	nop := func(pe *shmem.PE) error { return nil }
	cases := []struct {
		name, value string
		hosts       []string // pretend hosts: the remote-path variables are read only with a remote PE
		ok          bool
	}{
		{"GOSHMEM_TIMEOUT", "1ns", nil, false},
		{"GOSHMEM_TIMEOUT", "0.0000000001", nil, false},
		{"GOSHMEM_TIMEOUT", "NaN", nil, false},
		{"GOSHMEM_TIMEOUT", "300000h", nil, false},
		{"GOSHMEM_TIMEOUT", "2ms", nil, true},
		{"GOSHMEM_TIMEOUT", " 30 ", nil, true},
		{"GOSHMEM_HEARTBEAT", "1ns", []string{"a", "b"}, false},
		{"GOSHMEM_HEARTBEAT", "10ms", []string{"a", "b"}, false},
		{"GOSHMEM_HEARTBEAT", "2h", []string{"a", "b"}, false},
		{"GOSHMEM_HEARTBEAT", "0.2", []string{"a", "b"}, true},
		{"GOSHMEM_HOST", "bad\nhost", nil, false},
		{"GOSHMEM_HOST", strings.Repeat("h", 256), nil, false},
		{"GOSHMEM_HOST", "node-7", nil, true},
		{"GOSHMEM_STREAMS", "17", []string{"a", "b"}, false},
		{"SHMEM_DEBUG", "maybe", nil, false},
		{"SHMEM_DEBUG", "", nil, true},
		{"SHMEM_DEBUG", " Yes ", nil, true},
		{"SHMEM_INFO", "2", nil, false},
		{"SHMEM_VERSION", "off", nil, true},
		{"GOSHMEM_SOCKBUF", "1K", []string{"a", "b"}, false},
	}
	for _, c := range cases {
		t.Run(c.name+"="+c.value[:min(len(c.value), 12)], func(t *testing.T) {
			t.Setenv(c.name, c.value)
			opts := []shmem.Option{shmem.WithHeapSize(1 << 20)}
			if c.name != "GOSHMEM_TIMEOUT" {
				opts = append(opts, shmem.WithTimeout(20*time.Second))
			}
			n := 1
			if c.hosts != nil {
				n = len(c.hosts)
				opts = append(opts, shmem.WithHosts(c.hosts))
			}
			err := shmem.Run(n, nop, opts...)
			if c.ok {
				if err != nil {
					t.Fatalf("%s=%q refused: %v", c.name, c.value, err)
				}
				return
			}
			if !errors.Is(err, shmem.ErrInvalid) || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("%s=%q: got %v, want ErrInvalid naming the variable", c.name, c.value, err)
			}
		})
	}
}
