package shmem

import "fmt"

// Strided and block-strided RMA. A block-strided transfer moves nblocks
// blocks of blockSize elements: block k starts at element k*stride of
// each side, with each side's own stride (at least 1). The strided
// transfers (IPut, IGet) are the case blockSize 1. Blocks are written in
// order, so where a destination's blocks overlap (a stride below the
// block size) the later block wins.
//
// Bounds: a transfer whose last element, (nblocks-1)*stride+blockSize-1,
// would fall outside its object or local slice is ErrOutOfBounds on every
// route, and nothing is changed. The check is blockSize <= n and
// nblocks-1 <= (n-blockSize)/stride, which no stride or count can make
// overflow.

// IPut is the strided put: element k*srcStride of src goes to element
// k*dstStride of dst on target, for k in 0..n-1 (shmem_iput). Strides
// are at least 1. A transfer whose last element would fall outside dst
// or src is ErrOutOfBounds, whatever the strides, and changes nothing.
func IPut[T Elem](dst Sym[T], dstStride int, src []T, srcStride, n, target int) error {
	return IBPut(dst, dstStride, src, srcStride, 1, n, target)
}

// IGet is the strided get: element k*srcStride of src on target goes to
// element k*dstStride of dst, for k in 0..n-1 (shmem_iget). Bounds are
// checked as for IPut.
func IGet[T Elem](dst []T, dstStride int, src Sym[T], srcStride, n, target int) error {
	return IBGet(dst, dstStride, src, srcStride, 1, n, target)
}

// IBPut is the block-strided put of OpenSHMEM 1.6 (shmem_ibput): block k,
// the blockSize elements from k*srcStride of src, goes to element
// k*dstStride of dst on target, for k in 0..nblocks-1. src may be reused
// when it returns; the data is complete at target after the next Quiet of
// dst's context.
func IBPut[T Elem](dst Sym[T], dstStride int, src []T, srcStride, blockSize, nblocks, target int) error {
	pe, p, lk, off, ext, err := dst.blocks(dstStride, len(src), srcStride, "source", blockSize, nblocks, target)
	if err != nil || ext == 0 {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		// Byte strides cannot overflow: with more than one block each
		// stride is below its side's length, which fits in memory.
		sz := sizeOf[T]()
		width := blockSize * sz
		ds, ss := dstStride*sz, srcStride*sz
		if nblocks == 1 {
			ds, ss = width, width
		}
		return lk.PutBlocks(off, ds, asBytes(src), ss, width, nblocks)
	}
	d := viewAs[T](p.mem, off, ext)
	for k := 0; k < nblocks; k++ {
		copy(d[k*dstStride:k*dstStride+blockSize], src[k*srcStride:k*srcStride+blockSize])
	}
	pe.notify(p, off, uint64(ext*sizeOf[T]()))
	return nil
}

// IBGet is the block-strided get of OpenSHMEM 1.6 (shmem_ibget): block k,
// the blockSize elements from k*srcStride of src on target, goes to
// element k*dstStride of dst, for k in 0..nblocks-1. Bounds are checked
// as for IBPut.
func IBGet[T Elem](dst []T, dstStride int, src Sym[T], srcStride, blockSize, nblocks, target int) error {
	pe, p, lk, off, ext, err := src.blocks(srcStride, len(dst), dstStride, "destination", blockSize, nblocks, target)
	if err != nil || ext == 0 {
		return err
	}
	defer pe.leave()
	if p.mem == nil {
		// Every block in flight at once, then one flush for all.
		sz := uint64(sizeOf[T]())
		for k := 0; k < nblocks; k++ {
			d := dst[k*dstStride : k*dstStride+blockSize]
			if err := lk.GetNBI(asBytes(d), off+uint64(k*srcStride)*sz); err != nil {
				return err
			}
		}
		return lk.Flush()
	}
	s := viewAs[T](p.mem, off, ext)
	for k := 0; k < nblocks; k++ {
		copy(dst[k*dstStride:k*dstStride+blockSize], s[k*srcStride:k*srcStride+blockSize])
	}
	return nil
}

// blocksFit reports, without overflow, whether nblocks blocks of
// blockSize elements at stride fit in n elements (stride >= 1, counts
// >= 0).
func blocksFit(n, stride, blockSize, nblocks int) bool {
	return nblocks == 0 || blockSize == 0 || (blockSize <= n && nblocks-1 <= (n-blockSize)/stride)
}

// blocksPast is the error of a pattern that does not fit.
func blocksPast(what string, n, stride, blockSize, nblocks int) error {
	return fmt.Errorf("shmem: %d blocks of %d elements with stride %d reach past the %d-element %s: %w",
		nblocks, blockSize, stride, n, what, ErrOutOfBounds)
}

// blocks validates a block-strided transfer between s (from element 0,
// at stride) and a local slice of localLen elements (at localStride,
// named local in errors): strides at least 1, counts not negative, the
// last block inside both sides. It enters the PE and returns, like span,
// the route, the byte offset of element 0 and the extent
// (nblocks-1)*stride+blockSize in elements. When nothing moves (extent
// 0) it has already left the PE again; otherwise the caller calls
// pe.leave when done.
func (s Sym[T]) blocks(stride, localLen, localStride int, local string, blockSize, nblocks, target int) (*PE, *peer, remoteLink, uint64, int, error) {
	if stride < 1 || localStride < 1 || blockSize < 0 || nblocks < 0 {
		return nil, nil, nil, 0, 0, fmt.Errorf("shmem: block-strided transfer of %d blocks of %d elements with strides %d and %d: %w",
			nblocks, blockSize, stride, localStride, ErrInvalid)
	}
	if !blocksFit(localLen, localStride, blockSize, nblocks) {
		return nil, nil, nil, 0, 0, blocksPast(local+" slice", localLen, localStride, blockSize, nblocks)
	}
	if err := s.check(); err != nil {
		return nil, nil, nil, 0, 0, err
	}
	if !blocksFit(s.n, stride, blockSize, nblocks) {
		return nil, nil, nil, 0, 0, blocksPast(fmt.Sprintf("object at offset %d", s.off), s.n, stride, blockSize, nblocks)
	}
	ext := 0
	if nblocks > 0 && blockSize > 0 {
		ext = (nblocks-1)*stride + blockSize
	}
	pe, p, lk, off, err := s.span(0, ext, target)
	if err == nil && ext == 0 {
		pe.leave()
	}
	return pe, p, lk, off, ext, err
}
