package suite

import (
	"fmt"
	"io"
	"net"
	"time"
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
// builds limits in the same order, and this meets all PEs: connect),
// each PE dialing its right-hand neighbour. An error is kept and
// returned by every later call.
func (b *B) ringLink(bytes int) (*tcpRingLink, error) {
	if b.ringed {
		if b.ring != nil && len(b.ring.out) < bytes {
			b.ring.out, b.ring.in = make([]byte, bytes), make([]byte, bytes)
		}
		return b.ring, b.ringErr
	}
	b.ringed = true
	edges := make([]tcpEdge, b.npes)
	for r := range edges {
		edges[r] = tcpEdge{dial: r, listen: (r + 1) % b.npes}
	}
	c, err := b.connect("the "+limTCPRing+" limit", edges)
	if err != nil {
		b.ringErr = err
		return nil, err
	}
	right, left := (b.rank+1)%b.npes, (b.rank+b.npes-1)%b.npes
	b.ring = &tcpRingLink{right: c.out[right], left: c.in[left], out: make([]byte, bytes), in: make([]byte, bytes)}
	return b.ring, nil
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
