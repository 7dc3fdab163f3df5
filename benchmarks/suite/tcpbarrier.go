package suite

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// limTCPBarrier is the TCP limit of a barrier of 3 or more PEs: the same
// barrier in plain Go over plain loopback TCP connections between all the
// job's PEs at once, gather to PE 0 and release (every other PE writes 8
// bytes to PE 0 and waits for 8 back; PE 0 reads one message from each,
// then writes one to each). That is 2(P-1) messages, the fewest a barrier
// of P PEs sends, and the cheapest pattern measured here when PEs
// outnumber cores, where the barrier is bound by the CPU time of its
// writes and reads (docs/performance.md, "The 4-PE TCP barrier: gather
// and release"). Each wait reads its socket with non-blocking raw
// read(2) calls that spin, or, when the PEs outnumber the CPUs, either
// follow an empty read with a raw sched_yield (so that the PE sharing
// the CPU runs) or block in read(2). The figure is PE 0's time per
// barrier.
//
// tcp-floor (ceil(log2 P) halves of a round trip between PEs 0 and 1
// while the others wait) is not that limit with more than 2 PEs: with 4
// PEs on 2 CPUs it is one parked round trip, 25-31 µs here, while the
// barrier's six messages alone cost about 46 µs of CPU time in C. Where
// the PEs outnumber the CPUs the limit is the faster of yielding and
// blocking waits (tcpBarrier).
const limTCPBarrier = "tcp-barrier"

// tcpStar is the connections of the tcp-barrier limit: on PE 0 one from
// every other PE (conns[r], r >= 1), elsewhere one to PE 0 (conns[0]).
type tcpStar struct {
	conns []net.Conn
	fds   []int // the connections' descriptors, for raw reads (valid while conns are open)
}

// starLink opens the connections the first time the limit is built
// (every PE builds limits in the same order, and this meets all PEs:
// connect). An error is kept and returned by every later call.
func (b *B) starLink() (*tcpStar, error) {
	if b.starred {
		return b.star, b.starErr
	}
	b.starred = true
	edges := make([]tcpEdge, 0, b.npes-1)
	for r := 1; r < b.npes; r++ {
		edges = append(edges, tcpEdge{dial: r, listen: 0})
	}
	c, err := b.connect("the "+limTCPBarrier+" limit", edges)
	if err != nil {
		b.starErr = err
		return nil, err
	}
	s := &tcpStar{conns: c.in, fds: make([]int, b.npes)}
	if b.rank != 0 {
		s.conns = c.out
	}
	for r, c := range s.conns {
		if c == nil {
			continue
		}
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err == nil {
			err = rc.Control(func(fd uintptr) { s.fds[r] = int(fd) })
		}
		if err != nil {
			b.starErr = fmt.Errorf("goshbench: PE %d opening the %s limit: %w", b.rank, limTCPBarrier, err)
			return nil, b.starErr
		}
	}
	b.star = s
	return s, nil
}

// wait reads the 8 bytes of one message from the connection to or from
// PE r: with raw non-blocking reads, yielding the CPU after an empty one
// when yield is set (way waitYield or waitSpin), or with blocking reads
// (waitBlock: the descriptors are in blocking mode then, and a read
// gives up after the job's timeout, SO_RCVTIMEO); it fails at deadline.
func (s *tcpStar) wait(r int, buf *[8]byte, way starWay, deadline time.Time) error {
	got := 0
	for i := 1; got < len(buf); i++ {
		p, n := uintptr(unsafe.Pointer(&buf[got])), uintptr(len(buf)-got)
		var k uintptr
		var errno syscall.Errno
		if way == waitBlock {
			k, _, errno = syscall.Syscall(syscall.SYS_READ, uintptr(s.fds[r]), p, n)
		} else {
			k, _, errno = syscall.RawSyscall(syscall.SYS_READ, uintptr(s.fds[r]), p, n)
		}
		switch {
		case errno == 0 && k == 0:
			return io.ErrUnexpectedEOF
		case errno == 0:
			got += int(k)
			continue
		case errno != syscall.EAGAIN && errno != syscall.EINTR:
			return errno
		}
		switch {
		case way == waitYield:
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		case way == waitPoll && i%pollGosched == 0:
			runtime.Gosched() // as spinRead does
		}
		if (way == waitBlock || i%1024 == 0) && time.Now().After(deadline) {
			return fmt.Errorf("no message from PE %d within the timeout", r)
		}
	}
	return nil
}

// send writes one message to PE r's connection with a raw write(2) (8
// bytes: the socket takes them at once, blocking or not).
func (s *tcpStar) send(r int, msg *[8]byte) error {
	k, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(s.fds[r]), uintptr(unsafe.Pointer(&msg[0])), uintptr(len(msg)))
	switch {
	case errno != 0:
		return errno
	case int(k) != len(msg):
		return fmt.Errorf("a short write of %d bytes", k)
	}
	return nil
}

// How the tcp-barrier limit's waits wait.
type starWay uint8

const (
	waitPoll  starWay = iota // non-blocking reads in a loop
	waitYield                // non-blocking reads, sched_yield after an empty one
	waitBlock                // blocking reads: the kernel wakes the reader
)

// setBlocking puts the limit's descriptors in blocking mode, reads on
// them ending after timeout at the latest, or back.
func (s *tcpStar) setBlocking(on bool, timeout time.Duration) error {
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	if !on {
		tv = syscall.Timeval{}
	}
	for r, c := range s.conns {
		if c == nil {
			continue
		}
		if err := syscall.SetsockoptTimeval(s.fds[r], syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		if err := syscall.SetNonblock(s.fds[r], !on); err != nil {
			return err
		}
	}
	return nil
}

// barriers runs n barriers whose waits wait way's way, and returns PE
// 0's sample.
func (b *B) starBarriers(s *tcpStar, n int, way starWay) (sample, error) {
	deadline := time.Now().Add(b.cfg.Timeout)
	var msg, in [8]byte
	start := time.Now()
	for range n {
		if b.rank == 0 {
			for r := 1; r < b.npes; r++ {
				if err := s.wait(r, &in, way, deadline); err != nil {
					return sample{}, fmt.Errorf("goshbench: %s on PE 0: %w", limTCPBarrier, err)
				}
			}
			for r := 1; r < b.npes; r++ {
				if err := s.send(r, &msg); err != nil {
					return sample{}, fmt.Errorf("goshbench: %s on PE 0: %w", limTCPBarrier, err)
				}
			}
			continue
		}
		err := s.send(0, &msg)
		if err == nil {
			err = s.wait(0, &in, way, deadline)
		}
		if err != nil {
			return sample{}, fmt.Errorf("goshbench: %s on PE %d: %w", limTCPBarrier, b.rank, err)
		}
	}
	return timed(start, n, 0), nil
}

// tcpBarrier is the tcp-barrier limit. It runs with the PE's own Go
// processors (one on a PE with TCP links when the PEs outnumber the
// CPUs, as shmem sets it) and makes its reads, writes and yields raw
// system calls, as a C program would: with the runtime's default
// processors and the connections' own Write, the 4-PE limit read 74-106
// µs where goshmem's barrier read 40-70 in the same runs, and 34-51 µs
// (against 51-77) this way. Where the PEs do not outnumber
// the CPUs its waits spin. Where they do, it runs n barriers whose waits
// yield and n whose waits block, and keeps the faster: yielding is the
// cheaper way on a quiet machine (a sleeper's wake-up is paid by the
// writer, and a context switch by both), blocking where other jobs' busy
// threads take the CPU a yield hands over for a whole time slice.
// Every PE runs the same phases in the same order, so a barrier's PEs
// always wait the same way.
func (b *B) tcpBarrier() limit {
	s, serr := b.starLink()
	return limit{name: limTCPBarrier, run: func(n int) (sample, error) {
		if serr != nil {
			return sample{}, serr
		}
		if !b.oversub {
			return b.starBarriers(s, n, waitPoll)
		}
		best, err := b.starBarriers(s, n, waitYield)
		if err != nil {
			return sample{}, err
		}
		if err := s.setBlocking(true, b.cfg.Timeout); err != nil {
			return sample{}, err
		}
		blocked, err := b.starBarriers(s, n, waitBlock)
		if berr := s.setBlocking(false, 0); err == nil {
			err = berr
		}
		if err != nil {
			return sample{}, err
		}
		if blocked.ns < best.ns {
			best = blocked
		}
		return best, nil
	}}
}

// barrierLimit is the limit of the barrier figure: over TCP with 3 or
// more PEs tcp-barrier, otherwise syncLimit's floor of rounds one-way
// transfers (2 PEs over TCP: their two flags cross, half a round trip).
func (b *B) barrierLimit(rounds float64) limit {
	if b.remote() && b.npes >= 3 {
		return b.tcpBarrier()
	}
	return b.syncLimit(limBarrier, rounds)
}
