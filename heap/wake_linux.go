// Sleeping until a writer says the memory changed, and saying so: every
// PE owns one eventfd, its wake descriptor, and every writer that sees a
// sleeper (Watched) increments the PE's wake word (WakeOff) and then
// writes to the eventfd. With Yield, these are the raw system calls of
// heap/.
//
// Why an eventfd: Go's netpoller owns it, so a sleeping goroutine parks
// (its thread and Go processor go back to the scheduler, as for a socket
// read) and its deadline is a runtime timer; a same-host peer in another
// process holds its own copy of the descriptor (passed with the segment,
// SCM_RIGHTS), so one write reaches the sleeper from this process or any
// other, and from a link's reader goroutine alike. A write to a
// descriptor whose owner has closed its own copies is harmless: the
// writer's copy keeps the eventfd alive. (A FUTEX_WAKE is keyed by the
// page it names: through a mapping the writer has already retired,
// docs/shared-memory.md, it would reach nobody.)

package heap

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sleeper is the owner's side of a PE's wake descriptor. Each sleeping
// goroutine parks on a descriptor of its own, a duplicate of the eventfd
// registered with the netpoller (kept for reuse): the poller lets one
// goroutine at a time wait on a descriptor, a deadline belongs to the
// descriptor, and a write to the eventfd raises an event on every
// registered duplicate, so every sleeper hears every wake.
//
// No sleeper reads the counter: epoll reports a registration's event
// with the eventfd's readiness at the moment the event is collected, so
// one sleeper draining the counter could hide a wake from another whose
// event was not collected yet. The counter only grows (by one a wake;
// 2^64-2 wakes would saturate it); epoll raises an event on every write,
// whatever the count. What a sleeper compares instead is the owner's
// wake word (WakeOff), which every waker increments before it writes:
// see Sleep.
type Sleeper struct {
	mu     sync.Mutex // guards free, closed, and fd's lifetime
	fd     int        // the eventfd (EFD_NONBLOCK|EFD_CLOEXEC)
	free   []*sleepFD // registered duplicates not in use
	closed bool
}

// sleepFD is one registered duplicate, used by one Sleep at a time.
type sleepFD struct {
	f     *os.File
	rc    syscall.RawConn
	fn    func(uintptr) bool // the read's callback; made once, so a Sleep allocates nothing
	word  *uint32            // this Sleep's wake word and the value read before its checks
	seq   uint32
	first bool // fn's next call is its first of this Sleep
}

// NewSleeper creates a wake descriptor.
func NewSleeper() (*Sleeper, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("heap: creating the wake eventfd: %w", err)
	}
	return &Sleeper{fd: fd}, nil
}

// FD is the eventfd, to pass to a same-host peer (SendFDs). It stays
// valid until Close.
func (s *Sleeper) FD() int { return s.fd }

// Waker returns a Waker of its own on this eventfd (a duplicate), for
// the owner's writers and those in its process; word is the owner's
// wake word.
func (s *Sleeper) Waker(word *uint32) (*Waker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("heap: wake descriptor is closed")
	}
	fd, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("heap: duplicating the wake eventfd: %w", err)
	}
	return NewWaker(fd, word), nil
}

// Sleep parks the calling goroutine until a wake, or until the deadline
// passes (false). word is the owner's wake word and seq the value the
// caller read from it before it last checked what it waits for: Sleep
// returns true at once if the word moved since, and otherwise when a
// Wake of this eventfd arrives after the call began (or now and then for
// no reason). The caller checks its condition again either way.
//
// A waker increments the word, then writes to the eventfd. The
// registration exists before the call; the read resets the descriptor's
// ready state (an atomic store, so a full fence), forgetting events from
// before the call, and then loads the word. A wake whose increment the
// load missed writes to the eventfd after the load, so its event comes
// after the reset and ends the park, or keeps it from starting. One
// whose increment the load saw makes Sleep return at once. Only one
// Sleep may use a descriptor at a time: each takes one from the pool,
// or makes one.
func (s *Sleeper) Sleep(deadline time.Time, word *uint32, seq uint32) (bool, error) {
	d, err := s.get()
	if err != nil {
		return false, err
	}
	defer s.put(d)
	if err := d.f.SetReadDeadline(deadline); err != nil {
		return false, fmt.Errorf("heap: wake descriptor deadline: %w", err)
	}
	d.word, d.seq, d.first = word, seq, true
	err = d.rc.Read(d.fn)
	d.word = nil
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, nil
	}
	return false, fmt.Errorf("heap: sleeping on the wake descriptor: %w", err)
}

// check is the read's callback: true ends the read. Its first call (after
// the reset) compares the wake word; every later one follows an event.
func (d *sleepFD) check() bool {
	if d.first {
		d.first = false
		return atomic.LoadUint32(d.word) != d.seq
	}
	return true
}

func (s *Sleeper) get() (*sleepFD, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		d := s.free[n-1]
		s.free = s.free[:n-1]
		return d, nil
	}
	if s.closed {
		return nil, errors.New("heap: wake descriptor is closed")
	}
	fd, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("heap: duplicating the wake eventfd: %w", err)
	}
	// Non-blocking (the flag belongs to the eventfd, which the duplicate
	// shares): os.NewFile registers it with the netpoller.
	d := &sleepFD{f: os.NewFile(uintptr(fd), "goshmem-wake")}
	if d.rc, err = d.f.SyscallConn(); err != nil {
		d.f.Close()
		return nil, fmt.Errorf("heap: wake descriptor: %w", err)
	}
	d.fn = func(uintptr) bool { return d.check() }
	return d, nil
}

func (s *Sleeper) put(d *sleepFD) {
	// No deadline while in the pool: its timer would wake the process
	// for nobody.
	d.f.SetReadDeadline(time.Time{})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		d.f.Close()
		return
	}
	s.free = append(s.free, d)
}

// Close closes the eventfd and the duplicates not in use; one in use is
// closed when its Sleep returns. Wakers have their own descriptors.
func (s *Sleeper) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for _, d := range s.free {
		d.f.Close()
	}
	s.free = nil
	unix.Close(s.fd)
}

// Waker wakes one PE's sleepers, through its wake word and one
// descriptor of its wake eventfd: the owner's (Sleeper.Waker) or a copy
// received from a same-host peer. It is safe for concurrent use; Wake
// after Close does nothing.
type Waker struct {
	// mu is read-held by every Wake and write-held by Close, so no write
	// can reach the descriptor's number after it was closed (and maybe
	// reused): writers that race a Finalize (a same-host put of a
	// launched PE is not counted in the gate) stay harmless.
	mu     sync.RWMutex
	fd     int
	word   *uint32 // the owner's wake word (WakeOff), in this process's mapping
	closed bool
}

// NewWaker takes ownership of fd, an eventfd; word is its owner's wake
// word as mapped here.
func NewWaker(fd int, word *uint32) *Waker { return &Waker{fd: fd, word: word} }

// Wake increments the owner's wake word, then adds one to the eventfd:
// every goroutine asleep in the owner's Sleep returns to check its
// condition, and one about to sleep sees the word moved (Sleep says why
// the order matters). The write is a raw system call (a write to a
// non-blocking eventfd returns at once), so the scheduler is not told.
func (w *Waker) Wake() {
	one := uint64(1)
	atomic.AddUint32(w.word, 1)
	w.mu.RLock()
	if !w.closed {
		unix.RawSyscall(unix.SYS_WRITE, uintptr(w.fd), uintptr(unsafe.Pointer(&one)), 8)
	}
	w.mu.RUnlock()
}

// Close closes the descriptor once no Wake is writing to it.
func (w *Waker) Close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		unix.Close(w.fd)
	}
}

// Yield gives up the processor to other threads and processes
// (sched_yield), for waits when PEs outnumber cores.
//
// It is a raw system call: the Go scheduler is not told, and the
// goroutine keeps its thread and its Go processor. sched_yield returns
// as soon as the kernel runs the thread again, but that may be after the
// PE sharing the core ran for a while; through syscall.Syscall the
// runtime then treats the yield as a blocking call, hands the processor
// to another thread, and the goroutine resumes on a thread that must be
// woken first: a 4-process flat barrier on 2 CPUs took 2.9 to 5.3 µs a
// call so, 1.8 to 2.5 µs with the raw call, as a C program does
// (docs/performance.md). The cost: while the thread is off its CPU, the
// process's other goroutines have one Go processor fewer.
func Yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
