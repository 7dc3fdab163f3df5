package boot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/internal/errs"
)

// FuzzReadFrame: a byte stream from an unauthenticated peer, read frame
// by frame with the handshake's limit or the full one. Every frame read
// re-encodes to exactly the bytes it consumed and is within the limit;
// the stream ends with io.EOF at a frame boundary, io.ErrUnexpectedEOF
// inside a frame, or an error wrapping errs.Protocol for a bad length;
// nothing panics.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, kindHello, []byte{0x80}), false)
	f.Add(appendFrame(appendFrame(nil, kindBye, nil), kindHello, bytes.Repeat([]byte{7}, 300)), true)
	f.Add([]byte{0, 0, 0, 0}, false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1}, false)
	f.Add([]byte{0, 0, 0x10, 0x01, 1, 2}, true)
	f.Add([]byte{0, 0}, true)
	f.Fuzz(func(t *testing.T, b []byte, handshake bool) {
		limit := MaxFrame
		if handshake {
			limit = maxHandshakeFrame
		}
		r := bytes.NewReader(b)
		off := 0
		for {
			kind, body, err := readFrame(r, limit)
			if err != nil {
				switch {
				case err == io.EOF:
					if off != len(b) {
						t.Fatalf("io.EOF at %d of %d bytes", off, len(b))
					}
				case err == io.ErrUnexpectedEOF, errors.Is(err, errs.Protocol):
				default:
					t.Fatalf("error %v is neither an end of stream nor errs.Protocol", err)
				}
				return
			}
			if 1+len(body) > limit {
				t.Fatalf("frame of %d bytes past the %d-byte limit", 1+len(body), limit)
			}
			enc := appendFrame(nil, kind, body)
			if !bytes.Equal(enc, b[off:off+len(enc)]) {
				t.Fatalf("frame at %d re-encodes to %x, read from %x", off, enc, b[off:off+len(enc)])
			}
			off += len(enc)
		}
	})
}

// FuzzParseEnv: the launcher's environment, as a user or a foreign
// launcher may set it. ParseEnv never panics; what it accepts is a
// consistent job, and what it refuses wraps errs.Invalid.
func FuzzParseEnv(f *testing.F) {
	key := strings.Repeat("ab", KeySize)
	f.Add("0", "2", "job", key, "127.0.0.1:1", "1")
	f.Add("3", "2", "job", key, "h:1", "")
	f.Add("-1", "x", "", "zz", "", "9")
	f.Add("2147483648", "2147483647", "j", key[:10], "unix:@x", "0")
	f.Fuzz(func(t *testing.T, rank, size, job, key, rdv, machine string) {
		vals := map[string]string{EnvRank: rank, EnvSize: size, EnvJobID: job, EnvKey: key, EnvRendezvous: rdv, EnvMachinePEs: machine}
		env, ok, err := ParseEnv(func(k string) (string, bool) { v, set := vals[k]; return v, set })
		if !ok {
			t.Fatal("EnvRank is set, but ParseEnv says no launcher")
		}
		if err != nil {
			if !errors.Is(err, errs.Invalid) {
				t.Fatalf("%v does not wrap errs.Invalid", err)
			}
			if len(key) >= 8 && strings.Contains(err.Error(), key) && !strings.Contains(rank+size+job+rdv+machine, key) {
				t.Fatalf("the error %q shows the key", err)
			}
			return
		}
		if env.Size < 1 || env.Rank < 0 || env.Rank >= env.Size || len(env.Key) != KeySize ||
			env.JobID == "" || env.Rendezvous == "" || env.MachinePEs < 0 || env.MachinePEs > env.Size {
			t.Fatalf("accepted an inconsistent job: %s", fmt.Sprintf("%+v", env))
		}
	})
}
