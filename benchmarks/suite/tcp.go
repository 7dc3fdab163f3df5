package suite

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// tcpLink is a loopback TCP connection between PEs 0 and 1, opened
// with the standard library only (Go's netpoller, TCP_NODELAY as Go
// sets it by default): the raw path that netmesh's TCP figures are
// held to.
type tcpLink struct {
	conn net.Conn
	raw  syscall.RawConn // conn's, for the polled round trip
	buf  []byte          // max(tcpStreamSize, the job's largest size) bytes
}

// link opens the connection the first time a TCP limit is built. Every
// PE calls it (limits are built on every PE, in the same order) because
// it meets all PEs (connect); PEs other than 0 and 1 get nil. An error
// is kept and returned by every later call, so that the limit's run
// reports it.
func (b *B) link() (*tcpLink, error) {
	if b.linked {
		return b.tcp, b.tcpErr
	}
	b.linked = true
	c, err := b.connect("the TCP limits", []tcpEdge{{dial: 0, listen: 1}})
	if err != nil {
		b.tcpErr = err
		return nil, err
	}
	if b.rank > 1 {
		return nil, nil
	}
	l := &tcpLink{conn: c.out[1], buf: make([]byte, max(tcpStreamSize, b.cfg.MaxSize()))}
	if b.rank == 1 {
		l.conn = c.in[0]
	}
	b.tcp = l
	return l, nil
}

// tcpRTT is a ping-pong between PEs 0 and 1 over the link: PE 0 writes
// out bytes, PE 1 reads them all and writes back bytes, PE 0 reads them
// all; n times. Each side waits for the other's bytes spinning on
// non-blocking reads (tcp-rtt-poll), as a polling runtime does, so what
// it measures is the kernel's loopback round trip and not the wake-up of
// a goroutine parked in the netpoller: the limit of every small remote
// operation (a GET request and its answer, an atomic, a Quiet's flush).
// With a figure's payload one way (size, 8 for a Put and its Quiet; 8,
// size for a Get) it is the least time plain Go takes to move those bytes
// and learn that they arrived.
//
// In a job whose PEs outnumber the CPUs the round trip is the parked one
// (tcp-rtt) instead: netmesh does not spin there (only waits poll, giving
// the CPU away after each look), and a spinning ping-pong between PEs 0
// and 1 would take the CPUs the other PEs need, leaving their polling
// paused when the figure it alternates with runs.
func (b *B) tcpRTT(out, back int) limit {
	if b.oversub {
		return b.pingPong(limTCPRTT, out, back, false)
	}
	return b.pingPong(limTCPRTTPoll, out, back, true)
}

// plainGo runs a limit of plain Go over loopback TCP with the Go
// processors a plain Go program started where this PE runs would have:
// one per CPU it may run on (its affinity now, after goshbench bound
// it; runtime.NumCPU() was read before that). A PE with TCP links whose
// machine's PEs outnumber its CPUs runs with its share of them (shmem
// lowers GOMAXPROCS), and the limit must still say what plain Go does
// here (the 4-PE tcp-ring read about 2.0 ms with the PEs' one processor,
// 1.4 ms with two); a bound PE has one CPU, and a second processor there
// only adds a thread that takes turns with the poller on it. The change
// is made outside the timed loop.
func plainGo(run measureFn) measureFn {
	return func(n int) (sample, error) {
		p := runtime.NumCPU()
		if cpus, err := allowedCPUs(); err == nil && len(cpus) > 0 {
			p = len(cpus)
		}
		if runtime.GOMAXPROCS(0) != p {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
		}
		return run(n)
	}
}

// tcpRTTParked is tcpRTT with Go's own blocking reads, which park the
// goroutine in the netpoller until the bytes come (tcp-rtt): what a
// runtime that never polls can reach. A reference in the limits suite.
func (b *B) tcpRTTParked() limit { return b.pingPong(limTCPRTT, 8, 8, false) }

func (b *B) pingPong(name string, out, back int, poll bool) limit {
	l, lerr := b.link()
	return limit{name: name, run: plainGo(func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		if lerr != nil {
			return sample{}, lerr
		}
		send, recv := l.buf[:out], l.buf[:back]
		if b.rank == 1 {
			send, recv = recv, send
		}
		deadline := time.Now().Add(b.cfg.Timeout)
		l.conn.SetDeadline(deadline)
		read := func(p []byte) error {
			_, err := io.ReadFull(l.conn, p)
			return err
		}
		if poll {
			read = func(p []byte) error { return l.spinRead(p, deadline) }
		}
		var err error
		start := time.Now()
		for range n {
			if b.rank == 0 {
				if _, err = l.conn.Write(send); err == nil {
					err = read(recv)
				}
			} else {
				if err = read(recv); err == nil {
					_, err = l.conn.Write(send)
				}
			}
			if err != nil {
				return sample{}, fmt.Errorf("goshbench: TCP ping-pong on PE %d: %w", b.rank, err)
			}
		}
		return timed(start, n, (out+back)*n), nil
	})}
}

// spinRead fills p from the link with non-blocking reads, never parking
// in the netpoller; it gives up at deadline. The reads are raw system
// calls (the socket is non-blocking, so none waits; through
// syscall.Syscall each would enter and leave the runtime's syscall
// state), and every pollGosched empty reads the goroutine yields its Go
// processor (runtime.Gosched), as a polling runtime must (netmesh's
// spinYield): while it never does, the process's other goroutines (a
// timer, a reader woken by the netpoller) get a processor only through
// another thread on the PE's one bound CPU, and the round trip paid for
// it. Bound PEs, 8 bytes: the plain spin read 30-55 µs where this reads
// 13-21 (docs/performance.md, "The tcp-rtt-poll limit spins as a
// poller must").
func (l *tcpLink) spinRead(p []byte, deadline time.Time) error {
	if l.raw == nil {
		rc, err := l.conn.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		l.raw = rc
	}
	var rerr error
	err := l.raw.Read(func(fd uintptr) bool {
		for i := 1; len(p) > 0; i++ {
			k, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch {
			case errno == 0 && k == 0:
				rerr = io.ErrUnexpectedEOF
				return true
			case errno == 0:
				p = p[k:]
				continue
			case errno != syscall.EAGAIN && errno != syscall.EINTR:
				rerr = os.NewSyscallError("read", errno)
				return true
			case i%1024 == 0 && time.Now().After(deadline):
				rerr = os.ErrDeadlineExceeded
				return true
			case i%pollGosched == 0:
				runtime.Gosched()
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return rerr
}

// pollGosched: a limit that spins on non-blocking reads yields its Go
// processor every pollGosched empty reads (spinRead, tcpStar.wait), as
// netmesh's pollers do (its spinYield).
const pollGosched = 32

// tcpFrames is tcpStream counted in frames of frameBytes bytes: the
// operations per second a link could carry if each operation cost
// exactly its frame on the wire and nothing else (the stream's bytes per
// second / frameBytes). It is the limit of the TCP rate figures, which
// only a runtime that coalesces many frames into each write can
// approach.
func (b *B) tcpFrames(frameBytes int) limit { return inFrames(b.tcpStream(), frameBytes) }

// inFrames renames stream limit l to tcp-stream-frames and counts its
// bytes in frames of frameBytes bytes.
func inFrames(l limit, frameBytes int) limit {
	run := l.run
	l.name = limTCPFrames
	l.run = func(n int) (sample, error) {
		s, err := run(n)
		s.ops = s.bytes / float64(frameBytes)
		return s, err
	}
	return l
}

// tcpStream is PE 0 writing n 1 MiB buffers to PE 1, which reads them
// all and answers one byte; the time is PE 0's, up to the answer.
func (b *B) tcpStream() limit {
	l, lerr := b.link()
	return limit{name: limTCPStream, run: plainGo(func(n int) (sample, error) {
		if b.rank > 1 {
			return sample{}, nil
		}
		if lerr != nil {
			return sample{}, lerr
		}
		var err error
		l.conn.SetDeadline(time.Now().Add(b.cfg.Timeout))
		start := time.Now()
		if b.rank == 0 {
			for range n {
				if _, err = l.conn.Write(l.buf[:tcpStreamSize]); err != nil {
					break
				}
			}
			if err == nil {
				_, err = io.ReadFull(l.conn, l.buf[:1])
			}
		} else {
			for range n {
				if _, err = io.ReadFull(l.conn, l.buf[:tcpStreamSize]); err != nil {
					break
				}
			}
			if err == nil {
				_, err = l.conn.Write(l.buf[:1])
			}
		}
		if err != nil {
			return sample{}, fmt.Errorf("goshbench: TCP stream on PE %d: %w", b.rank, err)
		}
		return timed(start, n, n*tcpStreamSize), nil
	})}
}
