package shmem

// copyData is copy for RMA payloads. From about 1 MiB Go's copy switches
// to stores that bypass the cache; measured on this project's machines,
// a copy of up to a few MiB in 64 KiB pieces that stay in the cache runs
// 1.5x faster, and leaves the data where a same-host reader finds it.
// Above 8 MiB the bypassing copy wins again and is used whole.
func copyData(dst, src []byte) {
	n := min(len(dst), len(src))
	if n <= 512<<10 || n > 8<<20 {
		copy(dst, src)
		return
	}
	const piece = 64 << 10
	for o := 0; o < n; o += piece {
		e := min(o+piece, n)
		copy(dst[o:e], src[o:e])
	}
}

// Put copies src into dst[0:len(src)] on target. src may be reused when
// Put returns; the data is complete at target after the next Quiet (over
// shared memory it already is).
func Put[T Elem](dst Sym[T], src []T, target int) error {
	if p, off := dst.local(0, len(src), target); p != nil {
		copyData(p.mem[off:], asBytes(src))
		dst.b.pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
		dst.b.pe.leaveFast()
		return nil
	}
	pe, p, lk, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if len(src) == 0 {
		return nil
	}
	if p.mem == nil {
		return lk.Put(off, asBytes(src))
	}
	copyData(p.mem[off:], asBytes(src))
	pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
	return nil
}

// Get copies len(dst) elements of src on target into dst.
func Get[T Elem](dst []T, src Sym[T], target int) error {
	if p, off := src.local(0, len(dst), target); p != nil {
		copyData(asBytes(dst), p.mem[off:])
		src.b.pe.leaveFast()
		return nil
	}
	pe, p, lk, off, err := src.span(0, len(dst), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		if len(dst) == 0 {
			return nil
		}
		return lk.Get(asBytes(dst), off)
	}
	copyData(asBytes(dst), p.mem[off:])
	return nil
}

// P stores v into element i of dst on target.
func P[T Elem](dst Sym[T], i int, v T, target int) error {
	if p, off := dst.local(i, 1, target); p != nil {
		viewAs[T](p.mem, off, 1)[0] = v
		dst.b.pe.notify(p, off, uint64(sizeOf[T]()))
		dst.b.pe.leaveFast()
		return nil
	}
	pe, p, lk, off, err := dst.span(i, 1, target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		return lk.Put(off, asBytes([]T{v}))
	}
	viewAs[T](p.mem, off, 1)[0] = v
	pe.notify(p, off, uint64(sizeOf[T]()))
	return nil
}

// G loads element i of src on target.
func G[T Elem](src Sym[T], i int, target int) (T, error) {
	if p, off := src.local(i, 1, target); p != nil {
		v := viewAs[T](p.mem, off, 1)[0]
		src.b.pe.leaveFast()
		return v, nil
	}
	pe, p, lk, off, err := src.span(i, 1, target)
	if err != nil {
		var z T
		return z, err
	}
	defer pe.leave()
	if p.mem == nil {
		var v [1]T
		err := lk.Get(asBytes(v[:]), off)
		return v[0], err
	}
	return viewAs[T](p.mem, off, 1)[0], nil
}

// PutNBI is Put that may return before src has been read: src must not
// change until the next Quiet of dst's context.
func PutNBI[T Elem](dst Sym[T], src []T, target int) error {
	if p, off := dst.local(0, len(src), target); p != nil {
		copyData(p.mem[off:], asBytes(src))
		dst.b.pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
		dst.b.pe.leaveFast()
		return nil
	}
	pe, p, lk, off, err := dst.span(0, len(src), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if len(src) == 0 {
		return nil
	}
	if p.mem == nil {
		return lk.PutNBI(off, asBytes(src))
	}
	copyData(p.mem[off:], asBytes(src))
	pe.notify(p, off, uint64(len(src)*sizeOf[T]()))
	return nil
}

// GetNBI is Get that may return before dst is filled: dst is valid after
// the next Quiet of src's context.
func GetNBI[T Elem](dst []T, src Sym[T], target int) error {
	if p, off := src.local(0, len(dst), target); p != nil {
		copyData(asBytes(dst), p.mem[off:])
		src.b.pe.leaveFast()
		return nil
	}
	pe, p, lk, off, err := src.span(0, len(dst), target)
	if err != nil {
		return err
	}
	defer pe.leave()
	if len(dst) == 0 {
		return nil
	}
	if p.mem == nil {
		return lk.GetNBI(asBytes(dst), off)
	}
	copyData(asBytes(dst), p.mem[off:])
	return nil
}

// Fence orders this PE's puts, atomics and signals to each target on the
// default context: those issued before it are delivered before those
// issued after it.
//
// Over shared memory the puts of a goroutine become visible in order
// (each ends with a full fence, see notify, or, in a job on one host on
// amd64, its stores keep the CPU's store order: PE.chooseFence), and
// every atomic is a full fence. Over TCP a link is one ordered stream
// whose frames are applied in order, so Fence costs nothing; only a link
// that stripes large transfers over several connections (GOSHMEM_STREAMS)
// must flush to keep the order.
func (pe *PE) Fence() error {
	if pe == nil {
		return errNilPE("Fence")
	}
	if !pe.hasRemote {
		// Nothing to order and no memory touched: no need to enter.
		if !pe.running() {
			return pe.finalizedErr()
		}
		return pe.alive()
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	for r := range pe.peers {
		if l := pe.peers[r].link; l != nil && l.Outstanding() {
			if err := l.Fence(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Quiet completes every put, non-blocking operation and signal this PE
// issued on the default context: each is visible at its target. Over
// shared memory they already are, or are in this CPU's store buffer,
// which Quiet's fence then drains before the PE's later loads
// (PE.chooseFence); over TCP, Quiet flushes every link with
// operations outstanding and waits for the peers' replies.
func (pe *PE) Quiet() error {
	if pe == nil {
		return errNilPE("Quiet")
	}
	if !pe.hasRemote {
		// Nothing to complete and no memory touched: no need to enter.
		// The puts' stores only have to be seen before this PE's later
		// loads (asym mode: they skipped that fence).
		if !pe.running() {
			return pe.finalizedErr()
		}
		pe.storeLoadFence()
		return pe.alive()
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	return pe.flushAll()
}

// flushAll flushes every remote link with outstanding operations of the
// default context: the links' own streams, not the contexts' channels
// (a context's operations complete at its own Quiet, as OpenSHMEM's
// shmem_quiet and shmem_barrier_all complete the default context's).
func (pe *PE) flushAll() error { return pe.flushLinks(false) }

// flushEvery is flushAll for Finalize: the contexts' channels too, so
// that nothing a context left outstanding is lost when the links close.
func (pe *PE) flushEvery() error { return pe.flushLinks(true) }

func (pe *PE) flushLinks(channels bool) error {
	if !pe.hasRemote {
		return nil
	}
	for r := range pe.peers {
		l := pe.peers[r].link
		if tl, ok := l.(tcpLink); ok && channels {
			if tl.OutstandingAll() {
				if err := tl.FlushAll(); err != nil {
					return err
				}
			}
			continue
		}
		if l != nil && l.Outstanding() {
			if err := l.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// PEQuiet is Quiet for operations to the given targets only.
func (pe *PE) PEQuiet(targets ...int) error {
	if pe == nil {
		return errNilPE("PEQuiet")
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	pe.storeLoadFence()
	for _, t := range targets {
		p, err := pe.peer(t)
		if err != nil {
			return err
		}
		if p.link != nil && p.link.Outstanding() {
			if err := p.link.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// BarrierAll completes this PE's operations (Quiet), then waits until
// every PE has reached the barrier.
func (pe *PE) BarrierAll() error {
	if pe == nil {
		return errNilPE("BarrierAll")
	}
	if pe.checked() {
		return pe.barrierAllChecked()
	}
	// Admitted by the world team's lock, not the gate's count
	// (lifecycle.go): the barrier's only read-modify-writes of its own
	// are the lock's.
	t := pe.world
	if err := t.lockCall(); err != nil {
		return err
	}
	return pe.barrierAllLocked(t)
}

// BarrierAll's two paths are functions of their own, each with one
// defer and few returns, so that the compiler open-codes the defer: a
// defer it cannot (two defers and eight returns in one function) goes
// through the runtime's defer records, about a tenth of a 2-PE barrier
// over shared memory.

// barrierAllChecked is BarrierAll under SHMEM_DEBUG.
func (pe *PE) barrierAllChecked() error {
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	if err := pe.flushAll(); err != nil {
		return err
	}
	return pe.agree(opBarrier, 0, 0) // its two meetings are the barrier
}

// barrierAllLocked is BarrierAll holding the world team's lock, which it
// releases.
func (pe *PE) barrierAllLocked(t *Team) error {
	defer t.mu.Unlock()
	if err := pe.brokenErr(); err != nil {
		return err
	}
	if err := pe.flushAll(); err != nil {
		return err
	}
	return t.syncLocked()
}

// checked reports whether world-synchronising calls are checked for
// agreement (SHMEM_DEBUG, more than one PE).
func (pe *PE) checked() bool { return pe.cfg.Debug && pe.npes > 1 }

// barrierAll is BarrierAll for a caller that has entered the PE.
func (pe *PE) barrierAll() error {
	if err := pe.alive(); err != nil {
		return err
	}
	if err := pe.flushAll(); err != nil {
		return err
	}
	return pe.world.sync()
}

// SyncAll waits until every PE has reached it, without completing
// outstanding operations.
func (pe *PE) SyncAll() error {
	if pe == nil {
		return errNilPE("SyncAll")
	}
	if !pe.checked() {
		return pe.world.Sync()
	}
	if err := pe.enter(); err != nil {
		return err
	}
	defer pe.leave()
	if err := pe.alive(); err != nil {
		return err
	}
	return pe.agree(opSync, 0, 0)
}
