package shmem

import "fmt"

// The multi-element waits and tests (OpenSHMEM's _all, _any, _some and
// their _vector forms) on this PE's own copy of s. A mask selects the
// elements that take part: mask[i] true means element i is watched, and
// a nil mask watches every element (OpenSHMEM's status array has the
// opposite sense: there a nonzero entry excludes the element). The plain
// forms compare every element with one value v; the Vector forms compare
// element i with vs[i]. Every form reads each element with an atomic
// load, so a remote AtomicSet, Put or PutSignal into the object is seen
// as it lands.

// watch is one multi-element wait or test: the selected indices and what
// each is compared with.
type watch[T AtomicElem] struct {
	s   Sym[T]
	idx []int // the selected indices, ascending
	cmp Cmp
	v   T
	vs  []T // the Vector forms: element i is compared with vs[i]
}

// holds reports whether element i satisfies the watch's comparison.
func (w *watch[T]) holds(i int) bool {
	want := w.v
	if w.vs != nil {
		want = w.vs[i]
	}
	return compare(loadLocal(w.s, i), w.cmp, want)
}

// what names the watch in a timeout or loss error.
func (w *watch[T]) what(kind string, done int) string {
	with := fmt.Sprint(w.v)
	if w.vs != nil {
		with = "their vector entries"
	}
	return fmt.Sprintf("%s of %d selected elements at offset %d to be %v %s (%d seen)", kind, len(w.idx), w.s.off, w.cmp, with, done)
}

// newWatch validates a multi-element call and enters the PE; on success
// the caller calls pe.leave when done. vector says whether vs is the
// comparand vector (which must have one entry per element of s).
func newWatch[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T, vs []T, vector bool) (*PE, *watch[T], error) {
	pe, err := localCheck(s, cmp)
	if err != nil {
		return nil, nil, err
	}
	if vector && len(vs) != s.n {
		pe.leave()
		return nil, nil, fmt.Errorf("shmem: comparison vector of %d values for a %d-element object: %w", len(vs), s.n, ErrInvalid)
	}
	idx, err := selected(mask, s.n)
	if err != nil {
		pe.leave()
		return nil, nil, err
	}
	w := &watch[T]{s: s, idx: idx, cmp: cmp, v: v}
	if vector {
		w.vs = vs
		if w.vs == nil {
			w.vs = []T{} // s is empty: nothing is compared
		}
	}
	return pe, w, nil
}

// selected lists the indices a mask selects: mask[i] true means element i
// takes part; a nil mask selects every element.
func selected(mask []bool, n int) ([]int, error) {
	if mask != nil && len(mask) != n {
		return nil, fmt.Errorf("shmem: mask of %d entries for a %d-element object: %w", len(mask), n, ErrOutOfBounds)
	}
	idx := make([]int, 0, n)
	for i := 0; i < n; i++ {
		if mask == nil || mask[i] {
			idx = append(idx, i)
		}
	}
	return idx, nil
}

// waitAll returns once every selected element satisfied the comparison.
// Elements before next were seen to hold; each is checked until it holds
// once, as OpenSHMEM's wait_until_all does (a later change back is not
// seen).
func (w *watch[T]) waitAll(pe *PE) error {
	next := 0
	cond := func() bool {
		for next < len(w.idx) && w.holds(w.idx[next]) {
			next++
		}
		return next == len(w.idx)
	}
	return pe.await(w.s.off, uint64(w.s.n*sizeOf[T]()), cond, func() string { return w.what("all", next) })
}

// testAny is the first selected index that holds, or -1.
func (w *watch[T]) testAny() int {
	for _, i := range w.idx {
		if w.holds(i) {
			return i
		}
	}
	return -1
}

// testSome appends every selected index that holds to got[:0].
func (w *watch[T]) testSome(got []int) []int {
	got = got[:0]
	for _, i := range w.idx {
		if w.holds(i) {
			got = append(got, i)
		}
	}
	return got
}

// waitAny returns the first selected index that holds, once one does;
// -1 at once when nothing is selected.
func (w *watch[T]) waitAny(pe *PE) (int, error) {
	if len(w.idx) == 0 {
		return -1, nil
	}
	found := -1
	cond := func() bool { found = w.testAny(); return found >= 0 }
	if err := pe.await(w.s.off, uint64(w.s.n*sizeOf[T]()), cond, func() string { return w.what("any", 0) }); err != nil {
		return -1, err
	}
	return found, nil
}

// waitSome returns every selected index that holds, once one does; nil
// at once when nothing is selected.
func (w *watch[T]) waitSome(pe *PE) ([]int, error) {
	if len(w.idx) == 0 {
		return nil, nil
	}
	var got []int
	cond := func() bool { got = w.testSome(got); return len(got) > 0 }
	if err := pe.await(w.s.off, uint64(w.s.n*sizeOf[T]()), cond, func() string { return w.what("some", 0) }); err != nil {
		return nil, err
	}
	return got, nil
}

// testAll reports whether every selected element holds (true when
// nothing is selected).
func (w *watch[T]) testAll() bool {
	for _, i := range w.idx {
		if !w.holds(i) {
			return false
		}
	}
	return true
}

// WaitUntilAll blocks until every selected element satisfies cmp v
// (shmem_wait_until_all). Like WaitUntil it ends with ErrPeerLost or
// ErrTimeout when the job breaks or the PE's timeout passes.
func WaitUntilAll[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T) error {
	pe, w, err := newWatch(s, mask, cmp, v, nil, false)
	if err != nil {
		return err
	}
	defer pe.leave()
	return w.waitAll(pe)
}

// WaitUntilAny blocks until some selected element satisfies cmp v and
// returns its index (the lowest of those that do when it looks); -1 at
// once when nothing is selected.
func WaitUntilAny[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T) (int, error) {
	pe, w, err := newWatch(s, mask, cmp, v, nil, false)
	if err != nil {
		return -1, err
	}
	defer pe.leave()
	return w.waitAny(pe)
}

// WaitUntilSome blocks until at least one selected element satisfies
// cmp v and returns every selected index that does, ascending; nil at
// once when nothing is selected.
func WaitUntilSome[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T) ([]int, error) {
	pe, w, err := newWatch(s, mask, cmp, v, nil, false)
	if err != nil {
		return nil, err
	}
	defer pe.leave()
	return w.waitSome(pe)
}

// TestAll reports whether every selected element satisfies cmp v, without
// waiting (shmem_test_all); true when nothing is selected.
func TestAll[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T) (bool, error) {
	pe, w, err := newWatch(s, mask, cmp, v, nil, false)
	if err != nil {
		return false, err
	}
	defer pe.leave()
	return w.testAll(), nil
}

// TestAny returns the lowest selected index whose element satisfies
// cmp v, or -1 when none does (shmem_test_any, whose "none" is
// SIZE_MAX), without waiting.
func TestAny[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T) (int, error) {
	pe, w, err := newWatch(s, mask, cmp, v, nil, false)
	if err != nil {
		return -1, err
	}
	defer pe.leave()
	return w.testAny(), nil
}

// TestSome returns every selected index whose element satisfies cmp v,
// ascending, without waiting (shmem_test_some); empty when none does.
func TestSome[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T) ([]int, error) {
	pe, w, err := newWatch(s, mask, cmp, v, nil, false)
	if err != nil {
		return nil, err
	}
	defer pe.leave()
	return w.testSome(nil), nil
}

// WaitUntilAllVector is WaitUntilAll with element i compared with vs[i]
// (shmem_wait_until_all_vector). len(vs) must be s.Len() (ErrInvalid
// otherwise), whatever the mask selects.
func WaitUntilAllVector[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, vs []T) error {
	pe, w, err := newWatch(s, mask, cmp, 0, vs, true)
	if err != nil {
		return err
	}
	defer pe.leave()
	return w.waitAll(pe)
}

// WaitUntilAnyVector is WaitUntilAny with element i compared with vs[i].
func WaitUntilAnyVector[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, vs []T) (int, error) {
	pe, w, err := newWatch(s, mask, cmp, 0, vs, true)
	if err != nil {
		return -1, err
	}
	defer pe.leave()
	return w.waitAny(pe)
}

// WaitUntilSomeVector is WaitUntilSome with element i compared with vs[i].
func WaitUntilSomeVector[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, vs []T) ([]int, error) {
	pe, w, err := newWatch(s, mask, cmp, 0, vs, true)
	if err != nil {
		return nil, err
	}
	defer pe.leave()
	return w.waitSome(pe)
}

// TestAllVector is TestAll with element i compared with vs[i].
func TestAllVector[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, vs []T) (bool, error) {
	pe, w, err := newWatch(s, mask, cmp, 0, vs, true)
	if err != nil {
		return false, err
	}
	defer pe.leave()
	return w.testAll(), nil
}

// TestAnyVector is TestAny with element i compared with vs[i].
func TestAnyVector[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, vs []T) (int, error) {
	pe, w, err := newWatch(s, mask, cmp, 0, vs, true)
	if err != nil {
		return -1, err
	}
	defer pe.leave()
	return w.testAny(), nil
}

// TestSomeVector is TestSome with element i compared with vs[i].
func TestSomeVector[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, vs []T) ([]int, error) {
	pe, w, err := newWatch(s, mask, cmp, 0, vs, true)
	if err != nil {
		return nil, err
	}
	defer pe.leave()
	return w.testSome(nil), nil
}
