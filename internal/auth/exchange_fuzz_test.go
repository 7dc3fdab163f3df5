package auth

import (
	"bytes"
	"io"
	"testing"
)

// FuzzExchangeResponder feeds a responder arbitrary bytes: it must return
// an error (no input can carry a proof over the nonce it has just drawn),
// never panic, and write at most a RESPONSE and a REFUSE.
func FuzzExchangeResponder(f *testing.F) {
	chal := appendExMsg(nil, exChallenge, bytes.Repeat([]byte{7}, NonceSize))
	f.Add([]byte{})
	f.Add(chal)
	f.Add(append(append([]byte(nil), chal...), appendExMsg(nil, exProof, make([]byte, MACSize))...))
	f.Add(append(append([]byte(nil), chal...), appendRefuse(whyProof)...))
	f.Add(appendRefuse(whyMalformed))
	f.Add(appendExMsg(nil, exResponse, make([]byte, NonceSize+MACSize)))
	f.Add([]byte{exVersion + 1, exChallenge, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), &out}
		if err := Exchange(rw, testKey, Responder, "goshmem-fuzz", []byte("bound")); err == nil {
			t.Fatalf("responder accepted % x", in)
		}
		if out.Len() > exResponseLen+exRefuseLen {
			t.Fatalf("responder wrote %d bytes", out.Len())
		}
	})
}

// FuzzExchangeInitiator does the same for the initiator.
func FuzzExchangeInitiator(f *testing.F) {
	f.Add([]byte{})
	f.Add(appendExMsg(nil, exResponse, make([]byte, NonceSize+MACSize)))
	f.Add(appendRefuse(whyProof))
	f.Add(appendExMsg(nil, exChallenge, make([]byte, NonceSize)))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), &out}
		if err := Exchange(rw, testKey, Initiator, "goshmem-fuzz"); err == nil {
			t.Fatalf("initiator accepted % x", in)
		}
		if out.Len() > exChallengeLen+exRefuseLen {
			t.Fatalf("initiator wrote %d bytes", out.Len())
		}
	})
}
