package suite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/goshmem/goshmem/shmem"
)

// tcpEdge is one plain loopback TCP connection of a limit: PE dial opens
// it, PE listen accepts it.
type tcpEdge struct{ dial, listen int }

// tcpConns is one PE's ends of a limit's connections, by peer rank:
// out[r] is the one it dialed to PE r, in[r] the one it accepted from PE
// r, nil where there is none. Two PEs can have one each way (a ring of 2
// PEs), so the two sides are kept apart.
type tcpConns struct{ out, in []net.Conn }

// errDialerRank is the error of an accepted connection whose dialer
// names a rank this PE does not accept (dialerRank).
var errDialerRank = errors.New("a connection names a dialer this PE does not accept")

// tcpPortSlot is the xch slot in which a PE that dials for a limit finds
// its listener's port, or -1 where the listener could not listen.
func (b *B) tcpPortSlot() int { return 3*b.npes + 1 }

// connect opens the connections edges of a plain-Go TCP limit; what names
// the limit in errors ("the tcp-ring limit"). Every PE calls it with the
// same edges at the same point, whether or not it is in one of them: it
// meets all PEs in two barriers. A PE that accepts any edge listens on
// its tcpIP (loopback, or its namespace's address) once and puts its
// port into the port slot of each PE that dials it; after the first
// barrier each dialer reads its port, and after
// the second (which keeps a later connect from writing the slot before
// every dialer has read it) every PE dials and accepts at the same time,
// both within the job's timeout. A dialer sends its rank first
// (dialListener); the listener checks it (dialerRank) and keeps the
// connection under it. The connections have no deadline when connect
// returns.
//
// A PE dials at most one PE per call, since it has one port slot: edges
// that name a PE twice as a dialer, or a PE outside the job, are a bug of
// the caller and panic (on every PE alike).
//
// An error from the put or a barrier is the job's, and returned as it
// is. An error from listening, dialing or accepting is this PE's: it
// closes what it opened and names the PE and the limit.
func (b *B) connect(what string, edges []tcpEdge) (*tcpConns, error) {
	dials := make([]int, b.npes) // by dialer: 1 + the PE it dials
	from := make([]bool, b.npes) // the PEs that dial this PE
	nFrom := 0
	for _, e := range edges {
		if min(e.dial, e.listen) < 0 || max(e.dial, e.listen) >= b.npes {
			panic(fmt.Sprintf("suite: %s has a connection from PE %d to PE %d in a job of %d PEs", what, e.dial, e.listen, b.npes))
		}
		if dials[e.dial] != 0 {
			panic(fmt.Sprintf("suite: PE %d dials PEs %d and %d for %s, but has one port slot", e.dial, dials[e.dial]-1, e.listen, what))
		}
		dials[e.dial] = 1 + e.listen
		if e.listen == b.rank {
			from[e.dial] = true
			nFrom++
		}
	}
	to := dials[b.rank] - 1 // the PE this PE dials, or -1
	var ln *net.TCPListener
	var lerr error
	if nFrom > 0 {
		port := int64(-1)
		if ln, lerr = net.ListenTCP("tcp", &net.TCPAddr{IP: b.tcpIP(b.rank)}); lerr == nil {
			defer ln.Close()
			port = int64(ln.Addr().(*net.TCPAddr).Port)
		}
		for r, dials := range from {
			if !dials {
				continue
			}
			if err := shmem.P(b.xch, b.tcpPortSlot(), port, r); err != nil {
				return nil, err
			}
		}
	}
	if err := b.sync(); err != nil {
		return nil, err
	}
	port := int64(-1)
	if to >= 0 {
		port = b.xch.Local()[b.tcpPortSlot()]
	}
	if err := b.sync(); err != nil {
		return nil, err
	}
	if lerr != nil {
		return nil, fmt.Errorf("goshbench: PE %d listening for %s: %w", b.rank, what, lerr)
	}
	if to >= 0 && port < 0 {
		return nil, fmt.Errorf("goshbench: PE %d could not listen for %s", to, what)
	}

	c := &tcpConns{out: make([]net.Conn, b.npes), in: make([]net.Conn, b.npes)}
	deadline := time.Now().Add(b.cfg.Timeout)
	var aerr error
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		if nFrom > 0 {
			c.in, aerr = acceptDialers(ln, from, nFrom, deadline)
		}
	}()
	var err error
	if to >= 0 {
		c.out[to], err = dialListener(b.tcpIP(to), port, b.rank, deadline)
	}
	<-accepted
	if err == nil {
		err = aerr
	}
	if err != nil {
		closeConns(c.out)
		closeConns(c.in)
		return nil, fmt.Errorf("goshbench: PE %d opening %s: %w", b.rank, what, err)
	}
	return c, nil
}

// dialListener opens a connection to port on ip by deadline and
// sends rank on it, the connection's only bytes before the limit's own:
//
//	offset  width  order          meaning
//	0       8      little-endian  the dialer's rank
//
// acceptDialers reads them.
func dialListener(ip net.IP, port int64, rank int, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", (&net.TCPAddr{IP: ip, Port: int(port)}).String())
	if err != nil {
		return nil, err
	}
	var who [8]byte
	binary.LittleEndian.PutUint64(who[:], uint64(rank))
	if err = c.SetDeadline(deadline); err == nil {
		if _, err = c.Write(who[:]); err == nil {
			err = c.SetDeadline(time.Time{})
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// acceptDialers accepts n connections on ln by deadline, reads the rank
// each one's dialer sends, checks it against from (the ranks that dial
// this PE, len the job's PEs) and returns the connections by that rank.
// On an error it closes them all.
func acceptDialers(ln *net.TCPListener, from []bool, n int, deadline time.Time) ([]net.Conn, error) {
	in := make([]net.Conn, len(from))
	err := ln.SetDeadline(deadline)
	for i := 0; i < n && err == nil; i++ {
		var c net.Conn
		if c, err = ln.Accept(); err != nil {
			break
		}
		var who [8]byte
		r := -1
		if err = c.SetDeadline(deadline); err == nil {
			if _, err = io.ReadFull(c, who[:]); err == nil {
				if r, err = dialerRank(who, from, in); err == nil {
					err = c.SetDeadline(time.Time{})
				}
			}
		}
		if err != nil {
			c.Close()
			break
		}
		in[r] = c
	}
	if err != nil {
		closeConns(in)
		return nil, err
	}
	return in, nil
}

// dialerRank is the rank an accepted connection's dialer sent (who,
// little-endian), judged against from, the ranks that dial this PE (len
// the job's PEs), and in, the connections accepted so far by rank: it
// must be a PE of the job, one that dials this PE, and not one already
// connected. Otherwise the error wraps errDialerRank.
func dialerRank(who [8]byte, from []bool, in []net.Conn) (int, error) {
	r := binary.LittleEndian.Uint64(who[:])
	switch {
	case r >= uint64(len(from)):
		return -1, fmt.Errorf("%w: PE %d, in a job of %d PEs", errDialerRank, r, len(from))
	case !from[r]:
		return -1, fmt.Errorf("%w: PE %d, which does not dial it", errDialerRank, r)
	case in[r] != nil:
		return -1, fmt.Errorf("%w: PE %d, which is connected already", errDialerRank, r)
	}
	return int(r), nil
}

// closeConns closes the connections of cs that are open.
func closeConns(cs []net.Conn) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}
