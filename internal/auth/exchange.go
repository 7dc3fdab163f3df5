package auth

import (
	"errors"
	"fmt"
	"io"

	"github.com/goshmem/goshmem/internal/errs"
)

// Exchange is the runtime's one challenge-response exchange: the boot
// handshake, the mesh handshake and the same-host segment exchange all
// authenticate their peer by running it, each under its own label, and
// none has an exchange of its own.
//
// Three messages, then the caller's protocol goes on (the initiator's
// caller usually answers with its own accept or refuse):
//
//	initiator -> responder  CHALLENGE  nonceI
//	responder -> initiator  RESPONSE   nonceR, proofR
//	initiator -> responder  PROOF      proofI
//
//	proofR = mac(key, label, "responder", nonceI, nonceR, bound...)
//	proofI = mac(key, label, "initiator", nonceI, nonceR, bound...)
//
// with MAC as in the package doc. Each message is a 4-byte header and a
// fixed body; nothing on the wire gives a length:
//
//	offset  width  meaning
//	0       1      exchange version, exVersion (0x01); checked before anything else
//	1       1      kind: 0xA1 CHALLENGE, 0xA2 RESPONSE, 0xA3 PROOF, 0xAF REFUSE
//	2       1      REFUSE: why (0x01 bad proof, 0x02 malformed, 0x03 version); else 0
//	3       1      reserved, 0
//	4       ...    CHALLENGE: nonceI [32]           (36 bytes in all)
//	               RESPONSE:  nonceR [32] proofR [32] (68 bytes)
//	               PROOF:     proofI [32]           (36 bytes)
//	               REFUSE:    nothing               (4 bytes)
//
// A side that finds a bad proof or a malformed message sends REFUSE in
// place of its next message (best effort) and returns.
//
// Properties:
//   - Both nonces are fresh random bytes drawn per call, so a
//     proof recorded in one exchange is worth nothing in another.
//   - Each proof covers both nonces, the prover's role, the label and
//     every bound field. The role keeps the responder's proof from being
//     reflected as the initiator's; the label keeps a proof made for one
//     use (boot, mesh, segment exchange) from being accepted by another;
//     bound carries the fields both sides sent in the clear before the
//     exchange (hellos, ranks, job id), so none of them can be altered
//     unseen.
//   - The responder proves only over a nonce the initiator committed to
//     first. The initiator proves only after it has checked the
//     responder's proof: a peer without the key gets no proof from it.
//   - Proofs are compared in constant time (hmac.Equal).
//   - Exchange waits only in Read and Write on rw, so a deadline set on
//     the connection bounds it; the deadline's error comes back wrapped
//     (errors.Is(err, os.ErrDeadlineExceeded)).
//   - Errors: a peer whose proof does not verify (it lacks the key, or
//     uses another label or other bound fields) gives ErrKey; a peer that
//     refused this side's proof gives ErrRefused; both wrap errs.Auth.
//     Bytes that are not the expected message give ErrMalformed, which
//     wraps errs.Protocol. A short read gives the reader's error
//     (io.EOF, io.ErrUnexpectedEOF). Nothing the peer sends panics.
//
// Success proves the peer holds the key at this moment; it does not bind
// the rest of the connection (see the package caveats).
func Exchange(rw io.ReadWriter, key []byte, role Role, label string, bound ...[]byte) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("auth: exchange %q with an empty key: %w", label, errs.Invalid)
	case label == "":
		return fmt.Errorf("auth: exchange with an empty label: %w", errs.Invalid)
	case role != Initiator && role != Responder:
		return fmt.Errorf("auth: exchange %q with role %d: %w", label, role, errs.Invalid)
	}
	if role == Initiator {
		return initiate(rw, key, label, bound)
	}
	return respond(rw, key, label, bound)
}

// Role is a side's part in an Exchange. The side that accepts
// connections from anyone (a server) should be the Initiator, so that
// it never proves anything to a stranger.
type Role uint8

const (
	Initiator Role = 1 // sends the first nonce, proves last
	Responder Role = 2 // proves first, over the initiator's nonce
)

func (r Role) String() string {
	switch r {
	case Initiator:
		return "initiator"
	case Responder:
		return "responder"
	}
	return fmt.Sprintf("role %d", uint8(r))
}

// Sentinels of Exchange, compared with errors.Is.
var (
	ErrKey       = errors.New("auth: the peer's proof does not verify with the job key")
	ErrRefused   = errors.New("auth: the peer refused this side's proof")
	ErrMalformed = errors.New("auth: malformed challenge-response message")
)

// Wire constants of Exchange; TestExchangeConst pins them.
const (
	exVersion   = 0x01
	exChallenge = 0xA1
	exResponse  = 0xA2
	exProof     = 0xA3
	exRefuse    = 0xAF

	exHeaderLen    = 4
	exChallengeLen = exHeaderLen + NonceSize           // 36
	exResponseLen  = exHeaderLen + NonceSize + MACSize // 68
	exProofLen     = exHeaderLen + MACSize             // 36
	exRefuseLen    = exHeaderLen                       // 4

	whyProof     = 0x01 // the proof does not verify
	whyMalformed = 0x02 // bytes that are not the expected message
	whyVersion   = 0x03 // another exchange version
)

func initiate(rw io.ReadWriter, key []byte, label string, bound [][]byte) error {
	nonceI := nonce()
	if _, err := rw.Write(appendExMsg(make([]byte, 0, exChallengeLen), exChallenge, nonceI)); err != nil {
		return fmt.Errorf("auth: %s: sending CHALLENGE: %w", label, err)
	}
	var b [exResponseLen]byte
	if err := readExMsg(rw, label, b[:], exResponse); err != nil {
		return err
	}
	nonceR, proofR := b[exHeaderLen:exHeaderLen+NonceSize], b[exHeaderLen+NonceSize:]
	if !equal(proofR, proof(key, label, Responder, nonceI, nonceR, bound)) {
		rw.Write(appendRefuse(whyProof))
		return fmt.Errorf("auth: %s: the responder's proof: %w: %w", label, ErrKey, errs.Auth)
	}
	if _, err := rw.Write(appendExMsg(make([]byte, 0, exProofLen), exProof, proof(key, label, Initiator, nonceI, nonceR, bound))); err != nil {
		return fmt.Errorf("auth: %s: sending PROOF: %w", label, err)
	}
	return nil
}

func respond(rw io.ReadWriter, key []byte, label string, bound [][]byte) error {
	var c [exChallengeLen]byte
	if err := readExMsg(rw, label, c[:], exChallenge); err != nil {
		return err
	}
	nonceI, nonceR := c[exHeaderLen:], nonce()
	if _, err := rw.Write(appendExMsg(make([]byte, 0, exResponseLen), exResponse, nonceR, proof(key, label, Responder, nonceI, nonceR, bound))); err != nil {
		return fmt.Errorf("auth: %s: sending RESPONSE: %w", label, err)
	}
	var p [exProofLen]byte
	if err := readExMsg(rw, label, p[:], exProof); err != nil {
		return err
	}
	if !equal(p[exHeaderLen:], proof(key, label, Initiator, nonceI, nonceR, bound)) {
		rw.Write(appendRefuse(whyProof))
		return fmt.Errorf("auth: %s: the initiator's proof: %w: %w", label, ErrKey, errs.Auth)
	}
	return nil
}

// proof is the MAC the side of role proves with.
func proof(key []byte, label string, role Role, nonceI, nonceR []byte, bound [][]byte) []byte {
	fields := make([][]byte, 0, 3+len(bound))
	fields = append(fields, []byte(role.String()), nonceI, nonceR)
	return mac(key, label, append(fields, bound...)...)
}

// appendExMsg appends the header of kind and then the body parts.
func appendExMsg(b []byte, kind byte, parts ...[]byte) []byte {
	b = append(b, exVersion, kind, 0, 0)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func appendRefuse(why byte) []byte { return []byte{exVersion, exRefuse, why, 0} }

// readExMsg reads the message of kind into b (len(b) is its length):
// the header first, judged by parseExHeader, then the body. A malformed
// header is answered with REFUSE.
func readExMsg(rw io.ReadWriter, label string, b []byte, kind byte) error {
	if _, err := io.ReadFull(rw, b[:exHeaderLen]); err != nil {
		return fmt.Errorf("auth: %s: reading %s: %w", label, exKindName(kind), err)
	}
	if err := parseExHeader(b[:exHeaderLen], kind); err != nil {
		var r *exRefused
		if !errors.As(err, &r) {
			why := byte(whyMalformed)
			if b[0] != exVersion {
				why = whyVersion
			}
			rw.Write(appendRefuse(why))
		}
		return fmt.Errorf("auth: %s: reading %s: %w", label, exKindName(kind), err)
	}
	if _, err := io.ReadFull(rw, b[exHeaderLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("auth: %s: reading %s: %w", label, exKindName(kind), err)
	}
	return nil
}

// parseExHeader judges a 4-byte header where a message of kind is due:
// the version first, then the kind; a REFUSE gives an *exRefused.
func parseExHeader(h []byte, kind byte) error {
	switch {
	case h[0] != exVersion:
		return fmt.Errorf("exchange version %d, want %d: %w: %w", h[0], exVersion, ErrMalformed, errs.Protocol)
	case h[1] == exRefuse && h[3] == 0:
		return &exRefused{why: h[2]}
	case h[1] != kind:
		return fmt.Errorf("message kind 0x%02x, want %s: %w: %w", h[1], exKindName(kind), ErrMalformed, errs.Protocol)
	case h[2] != 0 || h[3] != 0:
		return fmt.Errorf("%s with reserved bytes set: %w: %w", exKindName(kind), ErrMalformed, errs.Protocol)
	}
	return nil
}

// exRefused is the peer's REFUSE.
type exRefused struct{ why byte }

func (r *exRefused) Error() string {
	switch r.why {
	case whyProof:
		return ErrRefused.Error() + " (it does not verify)"
	case whyMalformed:
		return ErrRefused.Error() + " (it called this side's message malformed)"
	case whyVersion:
		return ErrRefused.Error() + " (another exchange version)"
	}
	return fmt.Sprintf("%s (reason 0x%02x)", ErrRefused, r.why)
}

func (r *exRefused) Is(target error) bool { return target == ErrRefused || target == errs.Auth }

func exKindName(kind byte) string {
	switch kind {
	case exChallenge:
		return "CHALLENGE"
	case exResponse:
		return "RESPONSE"
	case exProof:
		return "PROOF"
	case exRefuse:
		return "REFUSE"
	}
	return fmt.Sprintf("kind 0x%02x", kind)
}
