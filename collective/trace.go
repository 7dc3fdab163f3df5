package collective

import "github.com/goshmem/goshmem/shmem"

// The ownership exploration (explore_own_test.go) checks the real
// schedules of the collectives: it runs them once with a tracer that
// records, in each member's program order, every operation that touches
// another member's memory (or its own through the heap) and every
// signal and wait, then explores every interleaving of those sequences.
// tracer is nil outside that test; each site costs a load and a branch.
var tracer interface {
	note(pe *shmem.PE, o traceOp)
}

// traceKind is what a traced operation does.
type traceKind uint8

const (
	tBegin   traceKind = iota + 1 // the call begins (after BeginCollective)
	tEnd                          // the call returns (before EndCollective)
	tWrite                        // bytes [off, off+n) of the heap of world PE pe are written
	tRead                         // ... are read
	tSignal                       // word of the team's area of world PE pe: set to v, or v added
	tWait                         // this member waits for its own word >= v (and every word of more)
	tSave                         // this member saved its dst: others may land in it from here (reduceChain)
	tRestore                      // this member restored its dst: no one may touch it again in this call
)

// traceOp is one traced operation. A PutSignal is a tWrite with a
// signal (word >= 0): the data, then the signal.
type traceOp struct {
	kind   traceKind
	pe     int // world PE whose memory is touched or signalled
	off, n uint64
	word   int // index in the team's area words, or -1
	add    bool
	v      uint64
	more   []int // a tWait for several words: the others (a flat exchange's senders)
}

// traceRange notes an access of elements [lo, hi) of s on world PE w.
func traceRange[T shmem.Elem](c *call, k traceKind, s shmem.Sym[T], lo, hi, w int) {
	if tracer != nil && hi > lo {
		sz := uint64(sizeOf[T]())
		tracer.note(c.pe, traceOp{kind: k, pe: w, off: s.Offset() + uint64(lo)*sz, n: uint64(hi-lo) * sz, word: -1})
	}
}

// traceSignal notes a signal into word of world PE w's area, after the
// data of d (a PutSignal's) if d is not empty.
func traceSignal[T shmem.Elem](c *call, d shmem.Sym[T], w, word int, op shmem.SignalOp, v uint64) {
	if tracer != nil {
		sz := uint64(sizeOf[T]())
		tracer.note(c.pe, traceOp{kind: tWrite, pe: w, off: d.Offset(), n: uint64(d.Len()) * sz, word: word, add: op == shmem.SignalAdd, v: v})
	}
}

// traceWait notes a wait for this member's word >= v.
func (c *call) traceWait(word int, v uint64) {
	if tracer != nil {
		tracer.note(c.pe, traceOp{kind: tWait, pe: c.pe.MyPE(), word: word, v: v})
	}
}

// traceWaitExchange notes a flat exchange's wait for the sequence words
// of parity par of every other member's buffer to reach k, as one wait:
// the exchange looks at them in turn, but words only grow, so that ends
// exactly when one wait for all of them would.
func (c *call) traceWaitExchange(par int, k uint64) {
	if tracer == nil || c.n < 2 {
		return
	}
	var ws []int
	for s := 1; s < c.n; s++ {
		if !mutantExchangeSkip || s != c.n-1 {
			ws = append(ws, c.g.seqWord(par, (c.me+c.n-s)%c.n))
		}
	}
	tracer.note(c.pe, traceOp{kind: tWait, pe: c.pe.MyPE(), word: ws[0], v: k, more: ws[1:]})
}

// traceWaitRelay notes member 0's wait, in a gathered exchange, for
// every other member's relay slot of parity par, as one wait.
func (c *call) traceWaitRelay(par int, k uint64) {
	if tracer == nil {
		return
	}
	ws := make([]int, 0, c.n-1)
	for j := c.n - 1; j >= 1; j-- {
		if !mutantGatherSkip || j != 1 {
			ws = append(ws, ctlWords+c.g.relayAt(par, j)/8)
		}
	}
	tracer.note(c.pe, traceOp{kind: tWait, pe: c.pe.MyPE(), word: ws[0], v: k, more: ws[1:]})
}

// mutantGatherSkip breaks the gathered exchange's recorded program on
// purpose: member 0's wait leaves out member 1's slot, so it may release
// the others before member 1 has entered. Only the ownership
// exploration's mutation check sets it.
var mutantGatherSkip bool

// mutantNoEntry breaks FCollect on purpose: its pushes skip the entry
// exchange, so they may land in a member that has not entered the call.
// Only the ownership exploration's mutation check sets it.
var mutantNoEntry bool

// mutantHalvingNoWait breaks reduceHalving on purpose: a member returns
// without waiting for its last block, which its partner may then write
// after it has left. Only the ownership exploration's mutation check
// sets it.
var mutantHalvingNoWait bool

// mutantChainEarlyRestore breaks reduceChain on purpose: a middle member
// restores its dst before its last piece has landed, which its upstream
// neighbour may then write over the restored contents. Only the
// ownership exploration's mutation check sets it.
var mutantChainEarlyRestore bool

// mutantRootRingEarlyRestore breaks reduceRootRing on purpose: a
// non-root restores its dst before its last chunk has landed, which its
// left neighbour may then write over the restored contents. Only the
// ownership exploration's mutation check sets it.
var mutantRootRingEarlyRestore bool

// mutantExchangeSkip breaks the flat exchange's recorded schedule on
// purpose: the trace leaves out a member's wait for the message of its
// right-hand neighbour, so in the program the explorer follows the
// exchange is no longer a barrier. (The run itself still waits: its
// reads of the messages must find them, or the recording would fail.)
// Only the ownership exploration's mutation check sets it.
var mutantExchangeSkip bool
