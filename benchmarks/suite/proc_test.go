package suite

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A goroutine locked to a thread other than the main one sleeps 200
// times, each a voluntary context switch of that thread: readProc must
// count them, as a PE's waits run on such threads.
func TestReadProcCountsEveryThread(t *testing.T) {
	const sleeps = 200
	before := readProc()
	done := make(chan bool)
	var run func()
	run = func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if unix.Gettid() == unix.Getpid() { // the main thread: try another
			go run()
			return
		}
		for range sleeps {
			time.Sleep(50 * time.Microsecond)
		}
		done <- true
	}
	go run()
	<-done
	after := readProc()
	if got := after.voluntary - before.voluntary; got < sleeps {
		t.Errorf("%d voluntary switches counted across %d sleeps of another thread", got, sleeps)
	}
}
