package netmesh

// Judging parsed frames against this PE's segment. A parser has already
// checked that the bytes are well-formed; these checks decide whether the
// request may touch memory. They run before any payload byte is read, so a
// refused frame never changes the segment. Every failure is a protocol
// violation: an honest peer checks the same bounds (it learnt the segment
// size in the handshake) before it sends.

// inBounds reports whether [off, off+n) lies inside a segment of size
// bytes, without overflowing.
func inBounds(off, n, size uint64) bool { return off <= size && n <= size-off }

func checkRange(what string, off, n, size uint64) error {
	if !inBounds(off, n, size) {
		return malformed(codeBounds, "%s of %d bytes at offset %d: past the %d-byte segment", what, n, off, size)
	}
	return nil
}

// checkPut judges a PUT against a segment of size bytes.
func checkPut(h putHdr, size uint64) error { return checkRange("PUT", h.off, uint64(h.n), size) }

// checkGet judges a GET against a segment of size bytes.
func checkGet(h getHdr, size uint64) error { return checkRange("GET", h.off, uint64(h.n), size) }

// checkAtomic judges an ATOMIC against a segment of size bytes: a
// defined op, width 4 or 8, an aligned word inside the segment.
func checkAtomic(h atomicHdr, size uint64) error {
	switch {
	case !h.op.Valid():
		return malformed(codeAtomic, "ATOMIC with op 0x%02x", byte(h.op))
	case h.width != 4 && h.width != 8:
		return malformed(codeAtomic, "ATOMIC %s of width %d", h.op, h.width)
	case h.off%uint64(h.width) != 0:
		return malformed(codeAtomic, "ATOMIC %s of width %d at unaligned offset %d", h.op, h.width, h.off)
	case h.width == 4 && (h.v>>32 != 0 || h.cond>>32 != 0):
		return malformed(codeAtomic, "ATOMIC %s of width 4 with operands past 32 bits", h.op)
	case h.op != OpCSwap && h.cond != 0:
		return malformed(codeAtomic, "ATOMIC %s with a compare value", h.op)
	}
	return checkRange("ATOMIC", h.off, uint64(h.width), size)
}

// checkPutSignal judges a PUT_SIGNAL: the data range and the aligned
// 8-byte signal word must both lie inside the segment.
func checkPutSignal(h putSignalHdr, size uint64) error {
	if err := checkRange("PUT_SIGNAL data", h.off, uint64(h.n), size); err != nil {
		return err
	}
	if h.sigOff%8 != 0 {
		return malformed(codeAtomic, "PUT_SIGNAL signal at unaligned offset %d", h.sigOff)
	}
	return checkRange("PUT_SIGNAL signal", h.sigOff, 8, size)
}
