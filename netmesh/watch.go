package netmesh

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watcher is a stream's own epoll set (see lead.go). The stream's socket
// is in the set (EPOLLIN, edge-triggered) for the stream's life, and the
// set itself is registered with Go's netpoller, so the reader goroutine
// sleeps on it there and wakes when bytes arrive that the socket's
// receive low-water mark lets signal, or when it is woken on purpose (a
// read deadline in the past on the set). Nobody collects the set's
// events: its own wake-up of the netpoller is all that matters, and the
// kernel signals the set's pollers on every arrival that the mark lets
// through, whether or not the entry is still queued from an earlier one.
//
// Who hears of an arrival is decided by the mark alone. While the token
// is free or held by the reader goroutine the mark is 1: every arrival
// wakes the reader goroutine. While anyone else has the token (a caller,
// a poller, or nobody but lingering: token.wantQuiet) the socket is
// quiet: its mark (SO_RCVLOWAT) is raised to quietLowat, below which the
// kernel signals an arrival to no epoll set at all. That spares two
// wake-ups per arrival, not only the reader goroutine's: the socket is
// also registered with Go's netpoller (it is a net.TCPConn), whose idle
// thread otherwise wakes for every arrival although nobody waits on the
// socket there (each wake-up two epoll_pwait calls and a context switch,
// on the CPU the pollers need). Non-blocking reads return what is there
// whatever the mark. When the token is freed the mark is lowered to 1,
// and lowering signals the socket's readiness if bytes are queued (the
// kernel checks at once), so the reader goroutine's watch hears of bytes
// that arrived after the holder's last read. A holder about to park in
// conn.Read (a caller that stops polling, or anyone inside a frame)
// lowers the mark first (stream.loud), since a quiet socket would not
// wake the netpoller either. Bursts of quietLowat bytes or more, a full
// receive window and the peer's FIN still signal while quiet: the reader
// goroutine then wakes, finds the token held, and sleeps again.
type watcher struct {
	f      *os.File
	raw    syscall.RawConn // of f
	epfd   int
	woken  bool // under rmu: a deadline in the past is set on f
	closed bool // under rmu: f is closed (the reader goroutine ended)
	quiet  bool // under rmu: the socket's receive low-water mark is quietLowat
	loud   bool // under rmu: quiet, but the mark is 1 for a wait inside a frame (stream.loud)
	marks  int  // under rmu: system calls that set the mark (what a lingering token saves: TestLinger)

	ev    unix.EpollEvent // argument of ctl
	op    int
	cerr  error
	ctlFn func(fd uintptr)
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
	return nil
}

func (w *watcher) ctl(fd uintptr) {
	w.ev.Fd = int32(fd)
	w.cerr = unix.EpollCtl(w.epfd, w.op, int(fd), &w.ev)
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
	st.loudLocked()
	st.rmu.Unlock()
}

// loudLocked is loud with st.rmu held.
func (st *stream) loudLocked() {
	w := &st.w8
	if !w.quiet || w.loud {
		return
	}
	w.loud, w.lowat = true, 1
	st.raw.Control(w.lowFn) // a failure shows as the read's
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
	err := st.serve(nil, nil)
	st.rmu.Lock()
	defer st.rmu.Unlock()
	if err != errYield {
		st.endLocked(err)
		return true
	}
	st.releaseLocked()
	return false
}
