package auth

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef")
	otherKey = []byte("another key of thirty-two bytes!")
)

// TestExchangeConst pins the wire constants and message lengths.
func TestExchangeConst(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"exVersion", exVersion, 0x01},
		{"exChallenge", exChallenge, 0xA1},
		{"exResponse", exResponse, 0xA2},
		{"exProof", exProof, 0xA3},
		{"exRefuse", exRefuse, 0xAF},
		{"exHeaderLen", exHeaderLen, 4},
		{"exChallengeLen", exChallengeLen, 36},
		{"exResponseLen", exResponseLen, 68},
		{"exProofLen", exProofLen, 36},
		{"exRefuseLen", exRefuseLen, 4},
		{"whyProof", whyProof, 0x01},
		{"whyMalformed", whyMalformed, 0x02},
		{"whyVersion", whyVersion, 0x03},
		{"Initiator", int(Initiator), 1},
		{"Responder", int(Responder), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

// side is one end's setting in a table row.
type side struct {
	key   []byte
	label string
	bound [][]byte
}

// run runs both ends of an Exchange over a net.Pipe and returns the
// initiator's and the responder's errors.
func run(t *testing.T, i, r side) (ei, er error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		err := Exchange(b, r.key, Responder, r.label, r.bound...)
		b.Close() // a side that fails may leave its peer reading
		done <- err
	}()
	ei = Exchange(a, i.key, Initiator, i.label, i.bound...)
	a.Close()
	return ei, <-done
}

func TestExchange(t *testing.T) {
	good := side{testKey, "goshmem-test", [][]byte{[]byte("job"), Uint32(3)}}
	with := func(s side, f func(*side)) side { f(&s); return s }
	for _, c := range []struct {
		name   string
		i, r   side
		wi, wr error // errors.Is targets; nil means success
	}{
		{"good key both ways", good, good, nil, nil},
		{"no bound fields", with(good, func(s *side) { s.bound = nil }), with(good, func(s *side) { s.bound = nil }), nil, nil},
		// The responder proves first: the initiator finds the bad proof and
		// refuses, so it never proves itself to a peer without the key.
		{"responder has the wrong key", good, with(good, func(s *side) { s.key = otherKey }), ErrKey, ErrRefused},
		{"initiator has the wrong key", with(good, func(s *side) { s.key = otherKey }), good, ErrKey, ErrRefused},
		{"another label", good, with(good, func(s *side) { s.label = "goshmem-other" }), ErrKey, ErrRefused},
		{"other bound fields", good, with(good, func(s *side) { s.bound = [][]byte{[]byte("job"), Uint32(4)} }), ErrKey, ErrRefused},
		{"bound fields split elsewhere", good, with(good, func(s *side) { s.bound = [][]byte{[]byte("jo"), append([]byte("b"), Uint32(3)...)} }), ErrKey, ErrRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			ei, er := run(t, c.i, c.r)
			check := func(who string, err, want error) {
				switch {
				case want == nil && err != nil:
					t.Errorf("%s: %v", who, err)
				case want != nil && !errors.Is(err, want):
					t.Errorf("%s: %v, want %v", who, err, want)
				case want != nil && !errors.Is(err, errs.Auth):
					t.Errorf("%s: %v does not wrap errs.Auth", who, err)
				}
			}
			check("initiator", ei, c.wi)
			check("responder", er, c.wr)
		})
	}
}

// A wrong key is ErrKey on the checking side and ErrRefused on the other,
// never the other way round: the errors say who lacks the key.
func TestExchangeErrorsDiffer(t *testing.T) {
	if errors.Is(ErrKey, ErrRefused) || errors.Is(ErrRefused, ErrKey) || errors.Is(ErrMalformed, errs.Auth) {
		t.Fatal("sentinels overlap")
	}
}

// script runs one side of an Exchange against a scripted peer, fn, over
// a net.Pipe; the peer's end closes when fn returns.
func script(t *testing.T, role Role, label string, fn func(c net.Conn)) error {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		fn(b)
		b.Close()
		close(done)
	}()
	err := Exchange(a, testKey, role, label)
	a.Close()
	<-done
	return err
}

func readN(c net.Conn, n int) []byte {
	b := make([]byte, n)
	io.ReadFull(c, b)
	return b
}

// The responder's proof sent back as the initiator's does not verify:
// the role is part of what each side proves.
func TestExchangeReflection(t *testing.T) {
	// A fake initiator has no key: it sends a nonce and reflects the
	// responder's proof back.
	err := script(t, Responder, "goshmem-test", func(c net.Conn) {
		c.Write(appendExMsg(nil, exChallenge, nonce()))
		resp := readN(c, exResponseLen)
		c.Write(appendExMsg(nil, exProof, resp[exHeaderLen+NonceSize:]))
	})
	if !errors.Is(err, ErrKey) {
		t.Fatalf("reflected proof: %v, want ErrKey", err)
	}
	// A fake responder echoes the initiator's nonce as its own and proves
	// with a proof of the initiator's role it cannot have: there is none
	// to reflect, since the initiator proves last. Echoing the nonce
	// alone does not help it.
	err = script(t, Initiator, "goshmem-test", func(c net.Conn) {
		ch := readN(c, exChallengeLen)
		n := ch[exHeaderLen:]
		c.Write(appendExMsg(nil, exResponse, n, mac(testKey, "goshmem-test", []byte("initiator"), n, n)))
	})
	if !errors.Is(err, ErrKey) {
		t.Fatalf("initiator-role proof as the responder's: %v, want ErrKey", err)
	}
}

// A relay between an initiator and a responder of the same key succeeds
// under one label (the exchange proves the key, not the path), and fails
// when the responder's label differs: a proof made for one use is not
// accepted by another.
func TestExchangeReplayAcrossLabels(t *testing.T) {
	for _, c := range []struct {
		label string
		want  error
	}{
		{"goshmem-test-a", nil},
		{"goshmem-test-b", ErrKey},
	} {
		t.Run(c.label, func(t *testing.T) {
			err := script(t, Initiator, "goshmem-test-a", func(c1 net.Conn) {
				// Take the initiator's challenge to a real responder
				// under label c.label and bring its response back.
				c2, c3 := net.Pipe()
				defer c2.Close()
				go func() {
					Exchange(c3, testKey, Responder, c.label)
					c3.Close()
				}()
				c2.Write(readN(c1, exChallengeLen))
				c1.Write(readN(c2, exResponseLen))
				c2.Write(readN(c1, exProofLen))
			})
			if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("relayed response from label %q: %v, want %v", c.label, err, c.want)
			}
		})
	}
}

// Every side draws a fresh nonce per call: two exchanges never send the
// same CHALLENGE or RESPONSE.
func TestExchangeFreshNonces(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		script(t, Initiator, "goshmem-test", func(c net.Conn) {
			ch := readN(c, exChallengeLen)
			if seen[string(ch)] {
				t.Errorf("CHALLENGE % x sent twice", ch)
			}
			seen[string(ch)] = true
		})
		script(t, Responder, "goshmem-test", func(c net.Conn) {
			c.Write(appendExMsg(nil, exChallenge, make([]byte, NonceSize)))
			resp := readN(c, exResponseLen)
			if seen[string(resp)] {
				t.Errorf("RESPONSE % x sent twice", resp)
			}
			seen[string(resp)] = true
		})
	}
}

// Every prefix of every message a side receives is an error (never nil,
// never a panic), and so is each message with a byte of its header
// changed.
func TestExchangeTruncatedAndDamaged(t *testing.T) {
	resp := appendExMsg(nil, exResponse, nonce(), make([]byte, MACSize))
	chal := appendExMsg(nil, exChallenge, nonce())
	for n := 0; n < len(resp); n++ {
		if err := script(t, Initiator, "goshmem-test", func(c net.Conn) {
			readN(c, exChallengeLen)
			c.Write(resp[:n])
		}); err == nil || n > 0 && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("initiator given %d of %d RESPONSE bytes: %v", n, len(resp), err)
		}
	}
	for n := 0; n < len(chal); n++ {
		if err := script(t, Responder, "goshmem-test", func(c net.Conn) { c.Write(chal[:n]) }); err == nil {
			t.Errorf("responder given %d of %d CHALLENGE bytes: no error", n, len(chal))
		}
	}
	for n := 0; n < exProofLen; n++ {
		if err := script(t, Responder, "goshmem-test", func(c net.Conn) {
			c.Write(chal)
			resp := readN(c, exResponseLen)
			c.Write(appendExMsg(nil, exProof, resp[exHeaderLen+NonceSize:])[:n])
		}); err == nil {
			t.Errorf("responder given %d of %d PROOF bytes: no error", n, exProofLen)
		}
	}
	for at := 0; at < exHeaderLen; at++ {
		bad := append([]byte(nil), chal...)
		bad[at] ^= 0x40
		var got []byte
		err := script(t, Responder, "goshmem-test", func(c net.Conn) {
			go c.Write(bad) // the responder stops reading at the header
			got, _ = io.ReadAll(c)
		})
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, errs.Protocol) {
			t.Errorf("CHALLENGE with header byte %d changed: %v, want ErrMalformed", at, err)
		}
		if len(got) != exRefuseLen || got[1] != exRefuse {
			t.Errorf("CHALLENGE with header byte %d changed: answered % x, want a REFUSE", at, got)
		}
	}
}

// A REFUSE where a message is due is ErrRefused, whatever its reason.
func TestExchangeRefused(t *testing.T) {
	for _, why := range []byte{whyProof, whyMalformed, whyVersion, 0x7f} {
		err := script(t, Initiator, "goshmem-test", func(c net.Conn) {
			readN(c, exChallengeLen)
			c.Write(appendRefuse(why))
		})
		if !errors.Is(err, ErrRefused) || !errors.Is(err, errs.Auth) || errors.Is(err, ErrKey) {
			t.Errorf("REFUSE %#x: %v, want ErrRefused", why, err)
		}
	}
}

// Exchange waits only on rw: a deadline on the connection ends it, and
// its error comes back.
func TestExchangeDeadline(t *testing.T) {
	for _, role := range []Role{Initiator, Responder} {
		a, b := net.Pipe()
		go io.Copy(io.Discard, b) // a peer that reads and never answers
		a.SetDeadline(time.Now())
		err := Exchange(a, testKey, role, "goshmem-test")
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%v past its deadline: %v", role, err)
		}
		a.Close()
		b.Close()
	}
}

// Bad arguments are caller bugs reported as errs.Invalid before any I/O.
func TestExchangeInvalid(t *testing.T) {
	var w bytes.Buffer
	rw := struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(nil), &w}
	for _, err := range []error{
		Exchange(rw, nil, Initiator, "l"),
		Exchange(rw, testKey, Responder, ""),
		Exchange(rw, testKey, Role(9), "l"),
	} {
		if !errors.Is(err, errs.Invalid) {
			t.Errorf("%v, want errs.Invalid", err)
		}
	}
	if w.Len() != 0 {
		t.Fatalf("wrote % x", w.Bytes())
	}
}
