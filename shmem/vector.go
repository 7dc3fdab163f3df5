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

// watch is one multi-element wait or test: the selected elements and
// what each is compared with. It allocates nothing until a wait has to
// wait (the result of the Some forms aside).
type watch[T AtomicElem] struct {
	s    Sym[T]
	mask []bool // nil: every element
	cmp  Cmp
	v    T
	vs   []T // the Vector forms: element i is compared with vs[i]
}

// sel reports whether element i is selected.
func (w *watch[T]) sel(i int) bool { return w.mask == nil || w.mask[i] }

// holds reports whether element i satisfies the watch's comparison.
func (w *watch[T]) holds(i int) bool {
	want := w.v
	if w.vs != nil {
		want = w.vs[i]
	}
	return compare(loadLocal(w.s, i), w.cmp, want)
}

// none reports whether nothing is selected.
func (w *watch[T]) none() bool {
	for i := 0; i < w.s.n; i++ {
		if w.sel(i) {
			return false
		}
	}
	return true
}

// what names the watch in a timeout or loss error.
func (w *watch[T]) what(kind string, seen int) string {
	k := 0
	for i := 0; i < w.s.n; i++ {
		if w.sel(i) {
			k++
		}
	}
	with := fmt.Sprint(w.v)
	if w.vs != nil {
		with = "their vector entries"
	}
	return fmt.Sprintf("%s of %d selected elements at offset %d to be %v %s (%d seen)", kind, k, w.s.off, w.cmp, with, seen)
}

// newWatch validates a multi-element call and enters the PE; on success
// the caller calls pe.leave when done. vector says whether vs is the
// comparand vector (which must have one entry per element of s).
func newWatch[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, v T, vs []T, vector bool) (*PE, watch[T], error) {
	pe, err := localCheck(s, cmp)
	if err != nil {
		return nil, watch[T]{}, err
	}
	if vector && len(vs) != s.n {
		pe.leave()
		return nil, watch[T]{}, fmt.Errorf("shmem: comparison vector of %d values for a %d-element object: %w", len(vs), s.n, ErrInvalid)
	}
	if mask != nil && len(mask) != s.n {
		pe.leave()
		return nil, watch[T]{}, fmt.Errorf("shmem: mask of %d entries for a %d-element object: %w", len(mask), s.n, ErrOutOfBounds)
	}
	w := watch[T]{s: s, mask: mask, cmp: cmp, v: v}
	if vector {
		w.vs = vs
		if w.vs == nil {
			w.vs = []T{} // s is empty: nothing is compared
		}
	}
	return pe, w, nil
}

// allFrom returns the first selected index from next on that does not
// hold, or the object's length when every one does.
func (w *watch[T]) allFrom(next int) int {
	for ; next < w.s.n; next++ {
		if w.sel(next) && !w.holds(next) {
			break
		}
	}
	return next
}

// waitAll returns once every selected element satisfied the comparison.
// Elements before next were seen to hold; each is checked until it holds
// once, as OpenSHMEM's wait_until_all does (a later change back is not
// seen).
func (w *watch[T]) waitAll(pe *PE) error {
	next := w.allFrom(0)
	if next == w.s.n {
		return nil
	}
	c := *w // what the closures share: only a wait that waits allocates
	cond := func() bool { next = c.allFrom(next); return next == c.s.n }
	return pe.await(c.s.off, uint64(c.s.n*sizeOf[T]()), cond, func() string { return c.what("all", next) })
}

// testAny is the first selected index that holds, or -1.
func (w *watch[T]) testAny() int {
	for i := 0; i < w.s.n; i++ {
		if w.sel(i) && w.holds(i) {
			return i
		}
	}
	return -1
}

// testSome appends every selected index that holds to got[:0].
func (w *watch[T]) testSome(got []int) []int {
	got = got[:0]
	for i := 0; i < w.s.n; i++ {
		if w.sel(i) && w.holds(i) {
			got = append(got, i)
		}
	}
	return got
}

// waitAny returns the first selected index that holds, once one does;
// -1 at once when nothing is selected.
func (w *watch[T]) waitAny(pe *PE) (int, error) {
	if found := w.testAny(); found >= 0 || w.none() {
		return found, nil
	}
	c := *w
	found := -1
	cond := func() bool { found = c.testAny(); return found >= 0 }
	if err := pe.await(c.s.off, uint64(c.s.n*sizeOf[T]()), cond, func() string { return c.what("any", 0) }); err != nil {
		return -1, err
	}
	return found, nil
}

// WaitUntilAnyVectorFrom is WaitUntilAnyVector for a wait that only PE
// from can end (a package built on shmem waiting for a message from
// from, as ring's Comm does): it also returns, with index -1 and a nil
// error, once from has begun Finalize (Departed), since from stores
// nothing more, and every store it made before its Finalize began is
// here by then. The caller looks once more, then gives up on from. A
// from below 0, or this PE itself, watches no departure: the call is
// WaitUntilAnyVector. A from outside the job is ErrBadPE.
func WaitUntilAnyVectorFrom[T AtomicElem](s Sym[T], mask []bool, cmp Cmp, vs []T, from int) (int, error) {
	pe, w, err := newWatch(s, mask, cmp, 0, vs, true)
	if err != nil {
		return -1, err
	}
	defer pe.leave()
	if from >= pe.npes {
		return -1, fmt.Errorf("shmem: a wait for PE %d of a %d-PE job: %w", from, pe.npes, ErrBadPE)
	}
	if from < 0 || from == pe.rank {
		return w.waitAny(pe)
	}
	if s.n == 1 && mask == nil {
		// One word (a lane's pub word, a doorbell): no scan.
		v := vs[0]
		cond := func() bool { return compare(loadLocal(s, 0), cmp, v) }
		what := func() string {
			return fmt.Sprintf("the word at offset %d to be %v %v, or PE %d to begin Finalize", s.off, cmp, v, from)
		}
		if departed, err := pe.awaitWriter(from, s.off, uint64(sizeOf[T]()), cond, what); err != nil || departed {
			return -1, err
		}
		return 0, nil
	}
	if found := w.testAny(); found >= 0 || w.none() {
		return found, nil
	}
	c := w
	found := -1
	cond := func() bool { found = c.testAny(); return found >= 0 }
	what := func() string { return c.what("any", 0) + fmt.Sprintf(", or PE %d to begin Finalize", from) }
	if _, err := pe.awaitWriter(from, c.s.off, uint64(c.s.n*sizeOf[T]()), cond, what); err != nil {
		return -1, err
	}
	return found, nil
}

// waitSome returns every selected index that holds, once one does; nil
// at once when nothing is selected.
func (w *watch[T]) waitSome(pe *PE) ([]int, error) {
	if got := w.testSome(nil); len(got) > 0 || w.none() {
		return got, nil
	}
	c := *w
	var got []int
	cond := func() bool { got = c.testSome(got); return len(got) > 0 }
	if err := pe.await(c.s.off, uint64(c.s.n*sizeOf[T]()), cond, func() string { return c.what("some", 0) }); err != nil {
		return nil, err
	}
	return got, nil
}

// testAll reports whether every selected element holds (true when
// nothing is selected).
func (w *watch[T]) testAll() bool { return w.allFrom(0) == w.s.n }

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
