package netmesh

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watcher is a stream's own epoll set (see lead.go). The stream's socket
// is armed in the set (EPOLLIN) only while the read token is free or held
// by the reader goroutine, and the set itself is registered with Go's
// netpoller, so the reader goroutine sleeps on it there and wakes only
// when bytes arrive while no caller reads the stream, or when it is woken
// on purpose (a read deadline in the past on the set). A caller that
// takes the token disarms the socket (EPOLL_CTL_MOD without EPOLLIN) and
// arms it again when it frees the token, under the stream's rmu. Arming
// reports bytes that are already there, so none are missed between the
// holder's last read and the arming.
//
// The entry is edge-triggered, and nobody collects its events except to
// clear them: the set's own wake-up of the netpoller is all that matters.
// The kernel signals the set's pollers on each arrival while the socket
// is armed, and when arming finds it readable, but not when arming finds
// its entry still queued from an earlier arrival. So before arming, an
// entry that may still be queued from an arrival that the reader
// goroutine has already handled is cleared (epoll_wait without waiting).
// It can be queued only if the reader goroutine woke since the last
// arming (dirty); an arrival whose wake-up the reader has not yet handled
// needs no new signal.
//
// A poller (Mesh.Poll) that takes the token leaves the socket armed and
// makes it quiet instead: it raises the socket's receive low-water mark
// (SO_RCVLOWAT) to quietLowat, below which the kernel signals an arrival
// to no epoll set at all. That spares two wake-ups per arrival, not
// only the reader goroutine's: the socket is also registered with Go's
// netpoller (it is a net.TCPConn), whose idle thread otherwise wakes for
// every arrival although nobody waits on the socket there (each wake-up
// two epoll_pwait calls and a context switch, on the CPU the pollers
// need). Non-blocking reads return what is there whatever the mark. When
// the poller frees the token it lowers the mark to 1, and lowering
// signals the socket's readiness if bytes are queued (the kernel checks
// at once), so the reader goroutine's watch hears of bytes that arrived
// after the poller's last read, as arming reports them. A caller that
// takes the token from a poller has the mark lowered (it may park in
// conn.Read, which needs the readiness) and the socket disarmed. Bursts
// of quietLowat bytes or more, a full receive window and the peer's
// FIN still signal while quiet: the reader goroutine then wakes, finds
// the token held, and sleeps again.
type watcher struct {
	f      *os.File
	raw    syscall.RawConn // of f
	epfd   int
	armed  bool // under rmu: EPOLLIN is armed
	dirty  bool // under rmu: the reader woke since the last arming
	woken  bool // under rmu: a deadline in the past is set on f
	closed bool // under rmu: f is closed (the reader goroutine ended)
	quiet  bool // under rmu: the socket's receive low-water mark is quietLowat
	loud   bool // under rmu: quiet, but the mark is 1 for a wait inside a frame (stream.loud)
	marks  int  // under rmu: system calls that set the mark (what a lingering token saves: TestLinger)

	ev    unix.EpollEvent // argument of ctl
	op    int
	cerr  error
	ctlFn func(fd uintptr)
	evs   [1]unix.EpollEvent
	lowat int // argument of lowatCtl
	lowFn func(fd uintptr)
}

// quietLowat is a quiet socket's receive low-water mark: far above the
// frames a poller waits for (a barrier's flag is 24 bytes), and small
// enough that setting it does not grow the socket's receive buffer (the
// kernel grows it to hold the mark when it is larger than about half).
const quietLowat = 16 << 10

const watchEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET

// init creates the set with st's socket in it, armed.
func (w *watcher) init(st *stream) error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return os.NewSyscallError("fcntl", err)
	}
	w.epfd = epfd
	w.ctlFn = w.ctl
	w.lowFn = w.lowatCtl
	w.f = os.NewFile(uintptr(epfd), "netmesh-watch") // non-blocking: registered with the netpoller
	if w.raw, err = w.f.SyscallConn(); err != nil {
		w.f.Close()
		return err
	}
	if err := w.f.SetReadDeadline(time.Time{}); err != nil { // the reader cannot sleep on a set the netpoller does not take
		w.f.Close()
		return err
	}
	w.op, w.ev.Events = unix.EPOLL_CTL_ADD, watchEvents
	if err := st.raw.Control(w.ctlFn); err != nil {
		w.f.Close()
		return err
	}
	if w.cerr != nil {
		w.f.Close()
		return os.NewSyscallError("epoll_ctl", w.cerr)
	}
	w.armed = true
	return nil
}

func (w *watcher) ctl(fd uintptr) {
	w.ev.Fd = int32(fd)
	w.cerr = unix.EpollCtl(w.epfd, w.op, int(fd), &w.ev)
}

// set arms or disarms the socket. It reports false if the socket is
// closed (a closed socket has left the set by itself). st.rmu is held.
func (w *watcher) set(st *stream, on bool) bool {
	if w.closed {
		return false
	}
	if w.armed == on {
		return true
	}
	w.armed = on
	w.op, w.ev.Events = unix.EPOLL_CTL_MOD, unix.EPOLLET
	if on {
		if w.dirty {
			w.dirty = false
			unix.EpollWait(w.epfd, w.evs[:], 0)
		}
		w.ev.Events = watchEvents
	}
	return st.raw.Control(w.ctlFn) == nil && w.cerr == nil
}

// setQuiet makes the socket quiet or not (see watcher). It reports false
// if the mark could not be set. st.rmu is held.
func (w *watcher) setQuiet(st *stream, on bool) bool {
	if w.quiet == on {
		return true
	}
	w.quiet, w.loud = on, false
	w.lowat = 1
	if on {
		w.lowat = quietLowat
	}
	return st.raw.Control(w.lowFn) == nil && w.cerr == nil
}

// loud lowers a quiet socket's mark to 1 for a holder about to wait in
// the netpoller inside a frame (conn.Read): below quietLowat bytes the
// kernel would not wake it, and a rest of a frame shorter than that
// would wait for the peer's next bytes (TestPollerReadsSplitPayload). The token still wants the socket quiet,
// and w.quiet stays set, so that freeing the token still lowers the mark
// with a system call, which announces bytes queued meanwhile (arrivals
// while loud signal the reader goroutine too, which finds the token
// held). quietAgain raises it at the next frame boundary. Only the
// token's holder calls them, so w.quiet and w.loud are read without
// rmu: only a holder changes them.
func (st *stream) loud() {
	w := &st.w8
	if !w.quiet || w.loud {
		return
	}
	st.rmu.Lock()
	w.loud, w.lowat = true, 1
	st.raw.Control(w.lowFn) // a failure shows as the read's
	st.rmu.Unlock()
}

// quietAgain raises the mark that loud lowered.
func (st *stream) quietAgain() {
	w := &st.w8
	if !w.loud {
		return
	}
	st.rmu.Lock()
	w.loud = false
	if w.quiet {
		w.lowat = quietLowat
		st.raw.Control(w.lowFn)
	}
	st.rmu.Unlock()
}

func (w *watcher) lowatCtl(fd uintptr) {
	w.marks++
	w.cerr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, w.lowat)
}

func (w *watcher) arm(st *stream) bool { return w.set(st, true) }
func (w *watcher) disarm(st *stream)   { w.set(st, false) }

// wake gets the reader goroutine out of its sleep on the set, to look at
// the stream's state. st.rmu is held.
func (w *watcher) wake() {
	if !w.woken && !w.closed && w.f != nil {
		w.woken = true
		w.f.SetReadDeadline(pastTime)
	}
}

// readLoop is the stream's reader goroutine: it watches the stream while
// the read token is free and reports the end of the stream.
func (st *stream) readLoop() {
	defer st.l.m.wg.Done()
	err := st.watchLoop()
	st.rmu.Lock()
	st.endLocked(err)
	st.w8.closed = true
	st.w8.f.Close()
	st.rmu.Unlock()
	st.l.streamEnded(st, err)
	close(st.gone)
}

func (st *stream) watchLoop() error {
	for {
		err := st.w8.raw.Read(st.watchFn)
		st.rmu.Lock()
		if st.w8.woken {
			st.w8.woken = false
			st.w8.f.SetReadDeadline(time.Time{})
		}
		ended, rerr := st.tok.ended, st.rerr
		st.rmu.Unlock()
		if ended {
			return rerr
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return err // the set itself failed
		}
	}
}

// onWatch runs in the reader goroutine each time the set may have an event
// (and once at the start): if the token is free it takes it and applies
// what the socket holds, then frees it (or hands it to a follower). It
// returns true when the stream ended, false to sleep until the next
// event.
func (st *stream) onWatch(uintptr) bool {
	st.rmu.Lock()
	st.w8.dirty = true
	if st.tok.ended {
		st.rmu.Unlock()
		return true
	}
	if !st.takeLocked(heldReader, nil) {
		// A caller or poller reads; it puts the socket back when it
		// frees the token.
		st.rmu.Unlock()
		return false
	}
	st.rmu.Unlock()
	err := st.serve(nil)
	st.rmu.Lock()
	defer st.rmu.Unlock()
	if err != errYield {
		st.endLocked(err)
		return true
	}
	st.releaseLocked()
	return false
}
