package launch

import (
	"bytes"
	"io"
	"sync"
)

// maxLine bounds a buffered partial line; a longer line is written in
// pieces of this size, each tagged.
const maxLine = 64 << 10

// output serialises everything written to the job's stdout and stderr:
// PE lines and the launcher's own messages. One lock covers both
// streams, so a line is always written whole and lines never interleave.
type output struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
}

// lockedWriter writes to one stream of an output under its lock.
type lockedWriter struct {
	o *output
	w io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	return l.w.Write(p)
}

// lineWriter prefixes every line written to it and passes whole lines
// on. The exec package calls Write from one goroutine per stream; the
// mutex makes Flush safe against a late Write all the same.
type lineWriter struct {
	mu     sync.Mutex
	prefix []byte
	dst    io.Writer // a lockedWriter
	buf    []byte    // the partial line after the last newline
	line   []byte    // scratch: prefix + line
}

func newLineWriter(prefix string, dst io.Writer) *lineWriter {
	return &lineWriter{prefix: []byte(prefix), dst: dst}
}

// Write buffers p and writes every completed line with the prefix. It
// reports len(p) unless the destination fails.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			lw.buf = append(lw.buf, p...)
			for len(lw.buf) >= maxLine {
				if err := lw.emit(lw.buf[:maxLine], true); err != nil {
					return n, err
				}
				lw.buf = append(lw.buf[:0], lw.buf[maxLine:]...)
			}
			return n, nil
		}
		var err error
		if len(lw.buf) > 0 {
			lw.buf = append(lw.buf, p[:i+1]...)
			err = lw.emit(lw.buf, false)
			lw.buf = lw.buf[:0]
		} else {
			err = lw.emit(p[:i+1], false)
		}
		if err != nil {
			return n, err
		}
		p = p[i+1:]
	}
	return n, nil
}

// Flush writes a final partial line, ending it with a newline.
func (lw *lineWriter) Flush() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if len(lw.buf) == 0 {
		return nil
	}
	err := lw.emit(lw.buf, true)
	lw.buf = lw.buf[:0]
	return err
}

// emit writes prefix+line (+ "\n" if addNL) in one Write call.
func (lw *lineWriter) emit(line []byte, addNL bool) error {
	lw.line = append(append(lw.line[:0], lw.prefix...), line...)
	if addNL {
		lw.line = append(lw.line, '\n')
	}
	_, err := lw.dst.Write(lw.line)
	return err
}
