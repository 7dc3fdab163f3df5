package suite

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// rankBytes is rank as a dialer sends it.
func rankBytes(r uint64) []byte { return binary.LittleEndian.AppendUint64(nil, r) }

// listenLoopback is a listener on 127.0.0.1, closed at the end of the
// test.
func listenLoopback(t *testing.T) *net.TCPListener {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// A dialer's rank is accepted only if it is a PE of the job, one that
// dials this PE, and not connected yet.
func TestDialerRank(t *testing.T) {
	from := []bool{false, true, true} // a job of 3 PEs; PEs 1 and 2 dial this one
	have := make([]net.Conn, 3)
	have[2] = &net.TCPConn{} // PE 2 is connected
	for _, c := range []struct {
		r    uint64
		want int // -1: errDialerRank
	}{
		{1, 1}, {2, -1}, {0, -1}, {3, -1}, {1 << 63, -1}, {^uint64(0), -1},
	} {
		r, err := dialerRank([8]byte(rankBytes(c.r)), from, have)
		switch {
		case c.want >= 0 && (err != nil || r != c.want):
			t.Errorf("dialer %d: %d, %v; want %d", c.r, r, err, c.want)
		case c.want < 0 && !errors.Is(err, errDialerRank):
			t.Errorf("dialer %d: %d, %v; want errDialerRank", c.r, r, err)
		}
	}
}

// acceptDialers keeps each connection under the rank its dialer sends,
// and fails, closing every connection it accepted, on a rank it does not
// accept or a short identification. The dialers connect before it
// accepts (the listener's backlog holds them), in the order given.
func TestAcceptDialers(t *testing.T) {
	from := []bool{false, true, true, true} // a job of 4 PEs; PEs 1 to 3 dial this one
	for _, c := range []struct {
		what  string
		sends [][]byte
		want  error // nil: accepted, under the ranks sent
	}{
		{"in order", [][]byte{rankBytes(1), rankBytes(2), rankBytes(3)}, nil},
		{"any order", [][]byte{rankBytes(3), rankBytes(1), rankBytes(2)}, nil},
		{"out of the job", [][]byte{rankBytes(1), rankBytes(4), rankBytes(2)}, errDialerRank},
		{"not a dialer", [][]byte{rankBytes(2), rankBytes(0), rankBytes(1)}, errDialerRank},
		{"twice", [][]byte{rankBytes(1), rankBytes(2), rankBytes(1)}, errDialerRank},
		{"short", [][]byte{rankBytes(1), rankBytes(2), rankBytes(3)[:5]}, io.ErrUnexpectedEOF},
	} {
		t.Run(c.what, func(t *testing.T) {
			ln := listenLoopback(t)
			deadline := time.Now().Add(10 * time.Second) // a bound for a hang, never reached when it works
			dialers := make([]net.Conn, len(c.sends))
			for i, p := range c.sends {
				d, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				d.SetDeadline(deadline)
				if _, err := d.Write(p); err != nil {
					t.Fatal(err)
				}
				if len(p) < 8 {
					d.(*net.TCPConn).CloseWrite()
				}
				dialers[i] = d
			}
			in, err := acceptDialers(ln, from, len(c.sends), deadline)
			if c.want != nil {
				if !errors.Is(err, c.want) || in != nil {
					t.Fatalf("%d connections, %v; want %v", len(in), err, c.want)
				}
				// The first dialer was accepted: its connection is closed now.
				if _, err := dialers[0].Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("the first dialer reads %v, want EOF", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Each dialer's connection is kept under the rank it sent.
			for i, p := range c.sends {
				r := binary.LittleEndian.Uint64(p)
				if _, err := dialers[i].Write([]byte{byte(r)}); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 1)
				if _, err := io.ReadFull(in[r], got); err != nil || got[0] != byte(r) {
					t.Errorf("in[%d] reads %v, %v; want the byte PE %d's dialer wrote", r, got, err, r)
				}
			}
			if in[0] != nil {
				t.Errorf("in[0] is set; PE 0 does not dial")
			}
			closeConns(in)
		})
	}
}

// dialListener's connection identifies its PE to acceptDialers.
func TestDialListener(t *testing.T) {
	ln := listenLoopback(t)
	deadline := time.Now().Add(10 * time.Second) // a bound for a hang
	d, err := dialListener(net.IPv4(127, 0, 0, 1), int64(ln.Addr().(*net.TCPAddr).Port), 2, deadline)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in, err := acceptDialers(ln, []bool{false, false, true}, 1, deadline)
	if err != nil || in[2] == nil {
		t.Fatalf("%v, %v; want the connection under PE 2", in, err)
	}
	closeConns(in)
}
