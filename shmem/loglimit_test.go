package shmem

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A flood of refused strangers prints a burst, then a line a second
// that counts what it dropped (issue: 1737 lines under a flood).
func TestLogLimiter(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	l := newLogLimiter(&out, 3, func() time.Time { return now })
	for range 1000 {
		l.logf("netmesh: refused connection from %s", "10.0.0.9:1")
	}
	if n := strings.Count(out.String(), "\n"); n != logBurst {
		t.Fatalf("%d lines for 1000 refusals in one instant, want %d:\n%s", n, logBurst, out.String())
	}
	now = now.Add(logEvery)
	l.logf("netmesh: refused connection from %s", "10.0.0.9:2")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if len(lines) != logBurst+1 || !strings.Contains(last, "(995 similar lines suppressed)") || !strings.HasPrefix(last, "goshmem: PE 3: ") {
		t.Fatalf("after a second: %d lines, last %q", len(lines), last)
	}
	now = now.Add(time.Hour)
	for range logBurst {
		l.logf("x")
	}
	if n := strings.Count(out.String(), "\n"); n != 2*logBurst+1 {
		t.Fatalf("a quiet hour does not refill the burst: %d lines", n)
	}
}
