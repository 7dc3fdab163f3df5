package suite

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// limTCPRing is the TCP limit of an AllReduce: every PE streams the
// bytes a bandwidth-optimal AllReduce sends (2(P-1)/P of the vector) to
// its right-hand neighbour over plain loopback TCP while reading as many
// from its left-hand one, all PEs at once; no reduction and no
// synchronisation. Its figure is the time per round averaged over PEs.
const limTCPRing = "tcp-ring"

// tcpRingLink is the connections of the tcp-ring limit: to PE r+1 and
// from PE r-1.
type tcpRingLink struct {
	right, left net.Conn
	out, in     []byte
}

// ringLink opens the ring the first time the limit is built (every PE
// builds limits in the same order, and this meets all PEs). An error is
// returned by every later run.
func (b *B) ringLink(bytes int) (*tcpRingLink, error) {
	if b.ringed {
		if b.ring != nil && len(b.ring.out) < bytes {
			b.ring.out, b.ring.in = make([]byte, bytes), make([]byte, bytes)
		}
		return b.ring, b.ringErr
	}
	b.ringed = true
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	port := int64(-1)
	if err == nil {
		defer ln.Close()
		port = int64(ln.Addr().(*net.TCPAddr).Port)
	}
	// Tell the left-hand neighbour, which dials this PE, the port.
	left := (b.rank + b.npes - 1) % b.npes
	if perr := shmem.P(b.xch, 3*b.npes+1, port, left); perr != nil {
		return nil, perr
	}
	if serr := b.sync(); serr != nil {
		return nil, serr
	}
	if err != nil {
		b.ringErr = fmt.Errorf("goshbench: PE %d listening for the tcp-ring limit: %w", b.rank, err)
		return nil, b.ringErr
	}
	rport := b.xch.Local()[3*b.npes+1]
	if rport < 0 {
		b.ringErr = fmt.Errorf("goshbench: PE %d's right-hand neighbour could not listen for the tcp-ring limit", b.rank)
		return nil, b.ringErr
	}
	l := &tcpRingLink{out: make([]byte, bytes), in: make([]byte, bytes)}
	var aerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ln.SetDeadline(time.Now().Add(b.cfg.Timeout))
		l.left, aerr = ln.Accept()
	}()
	l.right, err = net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", rport), b.cfg.Timeout)
	wg.Wait()
	if err == nil {
		err = aerr
	}
	if err != nil {
		b.ringErr = fmt.Errorf("goshbench: PE %d opening the tcp-ring limit: %w", b.rank, err)
		return nil, b.ringErr
	}
	b.ring = l
	return l, nil
}

// tcpRing is the tcp-ring limit for an AllReduce of size bytes.
func (b *B) tcpRing(size int) limit {
	bytes := max(2*(b.npes-1)*size/b.npes, 1)
	l, lerr := b.ringLink(bytes)
	return limit{name: limTCPRing, run: plainGo(func(n int) (sample, error) {
		if lerr != nil {
			return sample{}, lerr
		}
		deadline := time.Now().Add(b.cfg.Timeout)
		l.right.SetDeadline(deadline)
		l.left.SetDeadline(deadline)
		start := time.Now()
		var werr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range n {
				if _, werr = l.right.Write(l.out[:bytes]); werr != nil {
					return
				}
			}
		}()
		var rerr error
		for range n {
			if _, rerr = io.ReadFull(l.left, l.in[:bytes]); rerr != nil {
				break
			}
		}
		<-done
		if rerr == nil {
			rerr = werr
		}
		if rerr != nil {
			return sample{}, fmt.Errorf("goshbench: tcp-ring on PE %d: %w", b.rank, rerr)
		}
		return b.meanOverPEs(timed(start, n, n*size))
	})}
}
