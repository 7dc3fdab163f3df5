package launch

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goshmem/goshmem/internal/boot"
	"github.com/goshmem/goshmem/internal/engine"
	"github.com/goshmem/goshmem/internal/errs"
)

// Exit codes of Run besides those a PE chose.
const (
	// CodeTimeout: Job.Timeout passed and the job was killed (as
	// coreutils timeout(1) does).
	CodeTimeout = 124
	// CodeFailure: the job could not start, was cancelled, or a PE lost
	// its launcher connection without a failing exit status.
	CodeFailure = 1
	// codeSignalBase + n: a PE was killed by signal n, or the launcher
	// forwarded signal n.
	codeSignalBase = 128
)

// Defaults.
const (
	// DefaultGrace is the time between SIGTERM and SIGKILL.
	DefaultGrace = 2 * time.Second
	// NoGrace as Job.Grace sends SIGKILL right after SIGTERM.
	NoGrace = time.Duration(-1)
	// lostWait is how long a lost launcher connection waits for the PE's
	// exit status before the loss itself is reported as the failure.
	lostWait = time.Second
)

// Job describes a job of N PE processes on this machine.
type Job struct {
	N         int
	Program   string   // a binary path or command name, or a Go package (see Build)
	Args      []string // the PEs' arguments
	TagOutput bool     // prefix every output line with "[rank] "
	// Timeout ends the job after this long (0: never); Run then returns
	// CodeTimeout.
	Timeout time.Duration
	Env     []string // "K=V" entries added to os.Environ() for every PE
	Hosts   []string // per-rank host identity (EnvHost); nil or len N
	Stdout  io.Writer
	Stderr  io.Writer
	// Logf receives the launcher's own messages, without a prefix or a
	// trailing newline. By default they go to Stderr as "goshrun: ...".
	Logf func(format string, args ...any)
	// Signals, if set, carries signals for the job (goshrun feeds it from
	// signal.Notify). The first is forwarded to every PE's process group;
	// PEs still running Grace later are killed, and Run returns 128 + the
	// signal number. A signal that arrives while the job is already
	// ending kills every PE at once.
	Signals <-chan os.Signal
	// Grace is the time between SIGTERM (or a forwarded signal) and
	// SIGKILL; 0 means DefaultGrace, and a negative Grace (NoGrace)
	// means none: SIGKILL follows the SIGTERM at once.
	Grace time.Duration
	// Listen is the address the boot server listens on; "" means
	// 127.0.0.1:0 (with Remote: this machine's address, port 0). PEs on
	// other hosts (or in other network namespaces) need an address they
	// can reach.
	Listen string

	// Remote, if set, runs the job across hosts (hosts.go): N is the sum
	// of the counts, and for each host Rsh starts Self there as an
	// agent (Join) that starts that host's PEs.
	Remote []Host
	// Rsh is the remote shell command, host name appended (default ssh).
	Rsh []string
	// Self is the goshrun binary to run on every host (default this
	// process's executable); it must exist at that path there.
	Self string

	// Join makes Run an agent: it starts N PEs with ranks Join.First ..
	// of a job Join.Size PEs whose boot server runs elsewhere (it runs
	// none), and ends them when Join.Lost is closed.
	Join *Join
}

// Join is what an agent needs to start its host's PEs of a job.
type Join struct {
	First, Size int
	JobID       string
	Key         []byte
	Rendezvous  string
	// Lost is closed when the agent's connection to the launcher that
	// started it is lost: the agent then ends its PEs.
	Lost <-chan struct{}
}

// Run builds the program if needed, starts a boot server on j.Listen,
// starts N PEs with the launcher environment (see the package doc), and
// waits for them.
//
// It returns 0 when every PE exited 0. When a PE fails — exits non-zero,
// is killed by a signal, or drops its boot connection without Bye — Run
// reports it in one line, sends SIGTERM to every other PE's process
// group, SIGKILL after Grace, and returns the failed PE's status (128 +
// signal number if killed; CodeFailure for a lost connection with status
// 0). When a PE asks for GlobalExit(code), the others are ended the same
// way and Run returns code. On Timeout it returns CodeTimeout.
//
// err is non-nil only when the job could not run to an outcome (bad Job,
// build or start failure, ctx done); exitCode is then CodeFailure. When
// Run returns, every PE has been reaped, each PE's process group has
// been sent SIGKILL, and no goroutine of Run remains.
func (j *Job) Run(ctx context.Context) (exitCode int, err error) {
	if err := j.validate(); err != nil {
		return CodeFailure, err
	}
	r := &runner{job: j, grace: j.Grace}
	switch {
	case r.grace == 0:
		r.grace = DefaultGrace
	case r.grace < 0:
		r.grace = 0
	}
	r.out = &output{stdout: j.Stdout, stderr: j.Stderr}
	if r.out.stdout == nil {
		r.out.stdout = os.Stdout
	}
	if r.out.stderr == nil {
		r.out.stderr = os.Stderr
	}
	r.logf = j.Logf
	if r.logf == nil {
		errw := lockedWriter{r.out, r.out.stderr}
		r.logf = func(format string, args ...any) {
			fmt.Fprintf(errw, "goshrun: "+format+"\n", args...)
		}
	}

	bin, cleanup, err := BuildLog(j.Program, r.logf)
	if err != nil {
		return CodeFailure, err
	}
	defer cleanup()

	if j.Join != nil {
		env := j.environ(j.Join.JobID, j.Join.Key, j.Join.Rendezvous)
		if err := r.start(bin, env); err != nil {
			return CodeFailure, err
		}
		return r.wait(ctx)
	}

	listen := j.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
		if len(j.Remote) > 0 {
			ip, err := engine.NodeIP()
			if err != nil {
				return CodeFailure, fmt.Errorf("launch: --hosts needs a rendezvous address the other hosts reach (set --rendezvous): %w", err)
			}
			listen = net.JoinHostPort(ip, "0")
		}
	}
	if h, _, err := net.SplitHostPort(listen); err != nil || h == "" || net.ParseIP(h).IsUnspecified() {
		// PEs dial the address the listener reports: a wildcard would
		// send every PE to itself.
		return CodeFailure, fmt.Errorf("launch: rendezvous address %q: want a specific host:port that every PE can reach: %w", listen, errs.Invalid)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return CodeFailure, fmt.Errorf("launch: boot server: %w", err)
	}
	jobID, key := NewJobID(), NewKey()
	r.srv = boot.NewServer(ln, jobID, key, j.N)
	serveErr := make(chan error, 1)
	go func() { serveErr <- r.srv.Serve(context.Background()) }()
	defer func() {
		r.srv.Close()
		<-serveErr
	}()

	if len(j.Remote) > 0 {
		defer func() {
			for _, w := range r.agentKeys {
				w.Close() // the agents end what is left of theirs
			}
		}()
		if err := r.startHosts(bin, jobID, key, ln.Addr().String()); err != nil {
			return CodeFailure, err
		}
		return r.wait(ctx)
	}
	env := j.environ(jobID, key, ln.Addr().String())
	if err := r.start(bin, env); err != nil {
		return CodeFailure, err
	}
	return r.wait(ctx)
}

func (j *Job) validate() error {
	if len(j.Remote) > 0 {
		if err := j.validateRemote(); err != nil {
			return err
		}
	}
	switch {
	case j.Join != nil && (j.Join.First < 0 || j.Join.First+j.N > j.Join.Size || len(j.Join.Key) == 0 || j.Join.JobID == "" || j.Join.Rendezvous == ""):
		return fmt.Errorf("launch: agent of PEs %d..%d in a job of %d: %w", j.Join.First, j.Join.First+j.N-1, j.Join.Size, errs.Invalid)
	case j.N < 1:
		return fmt.Errorf("launch: %d PEs: %w", j.N, errs.Invalid)
	case j.Program == "":
		return fmt.Errorf("launch: no program: %w", errs.Invalid)
	case j.Hosts != nil && len(j.Hosts) != j.N:
		return fmt.Errorf("launch: %d hosts for %d PEs: %w", len(j.Hosts), j.N, errs.Invalid)
	case j.Timeout < 0:
		return fmt.Errorf("launch: timeout %v: %w", j.Timeout, errs.Invalid)
	}
	for _, kv := range j.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("launch: environment entry %q is not K=V: %w", kv, errs.Invalid)
		}
	}
	return nil
}

// environ returns the environment of every PE, without the per-rank
// variables: os.Environ() minus the names of the launcher contract (so
// that a goshrun started from inside a PE does not pass on its own job's
// settings), then j.Env, then the job's values. Later entries win
// (os/exec keeps the last).
func (j *Job) environ(jobID string, key []byte, rendezvous string) []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case boot.EnvHost:
			// An agent keeps its host's GOSHMEM_HOST: the remote shell
			// set it for that host, not a job for its own PEs.
			if j.Join != nil {
				env = append(env, kv)
			}
		case boot.EnvRank, boot.EnvSize, boot.EnvJobID, boot.EnvKey,
			boot.EnvRendezvous, boot.EnvLauncher, boot.EnvMachinePEs:
		default:
			env = append(env, kv)
		}
	}
	env = append(env, j.Env...)
	size := j.N
	if j.Join != nil {
		size = j.Join.Size
	}
	return append(env,
		boot.EnvSize+"="+strconv.Itoa(size),
		boot.EnvJobID+"="+jobID,
		boot.EnvKey+"="+hex.EncodeToString(key),
		boot.EnvRendezvous+"="+rendezvous,
		boot.EnvLauncher+"="+boot.LauncherGoshrun,
		boot.EnvMachinePEs+"="+strconv.Itoa(j.N), // goshrun starts every PE here
	)
}

// runner is one Run in progress.
type runner struct {
	job   *Job
	grace time.Duration
	out   *output
	logf  func(format string, args ...any)
	srv   *boot.Server

	agentKeys []io.WriteCloser // Remote: each agent's standard input, open for the job
	pes       []*pe            // one per process: a PE, or (Remote) a host's agent
	byRank    []*pe            // the process that runs each rank
	exits     chan exitReport  // one report per started process; buffered for all
}

// pe is one PE process, or (Remote) the agent process of a host, which
// runs ranks rank .. rank+count-1.
type pe struct {
	rank    int
	count   int    // ranks it runs (1 for a PE)
	label   string // how messages name it: "PE 3", "host h2 (PEs 2-3)"
	cmd     *exec.Cmd
	flush   []*lineWriter // tagged output to flush when the process ends
	exited  bool          // reaped; its pid may be reused, so no more signals
	failed  bool          // reaped with a non-zero status
	spared  bool          // asked for GlobalExit: not sent SIGTERM
	lostBye bool          // its boot connection dropped without Bye
	joined  bool          // it joined the boot server at least once
}

// settleWait is how long the first failed exit waits for others before
// the launcher names the one that came first.
const settleWait = 100 * time.Millisecond

type exitHeld struct {
	idx  int // in runner.pes
	how  string
	code int
}

type exitReport struct {
	idx   int // in runner.pes
	state *os.ProcessState
}

// start starts every PE, and a goroutine per PE that reaps it. If one
// cannot start, the started ones are killed and reaped.
func (r *runner) start(bin string, env []string) error {
	j := r.job
	r.exits = make(chan exitReport, j.N)
	cmds := make([]*exec.Cmd, j.N)
	first := 0
	if j.Join != nil {
		first = j.Join.First
	}
	for i := range j.N {
		rank := first + i
		cmd := exec.Command(bin, j.Args...)
		cmd.Env = append(env[:len(env):len(env)], boot.EnvRank+"="+strconv.Itoa(rank))
		if j.Hosts != nil {
			cmd.Env = append(cmd.Env, boot.EnvHost+"="+j.Hosts[i])
		}
		// A PE that exits while something it started still holds its
		// output pipes does not stall the job for more than a grace.
		cmd.WaitDelay = max(r.grace, 200*time.Millisecond)
		p := &pe{rank: rank, count: 1, label: "PE " + strconv.Itoa(rank), cmd: cmd}
		cmd.Stdout = r.stream(p, r.out.stdout, rank)
		cmd.Stderr = r.stream(p, r.out.stderr, rank)
		cmds[i] = cmd
		r.pes = append(r.pes, p)
	}
	return r.launch(cmds)
}

// launch starts the processes of r.pes (cmds in the same order) and a
// goroutine per process that reaps it. If one cannot start, the started
// ones are killed and reaped.
func (r *runner) launch(cmds []*exec.Cmd) error {
	r.byRank = nil
	for _, p := range r.pes {
		for range p.count {
			r.byRank = append(r.byRank, p)
		}
	}
	if r.exits == nil || cap(r.exits) < len(cmds) {
		r.exits = make(chan exitReport, len(cmds))
	}
	n, err := startAll(cmds)
	for i, p := range r.pes[:n] {
		go func() {
			p.cmd.Wait()
			for _, lw := range p.flush {
				lw.Flush()
			}
			r.exits <- exitReport{idx: i, state: p.cmd.ProcessState}
		}()
	}
	if err == nil {
		return nil
	}
	failed := r.pes[n].label
	r.pes = r.pes[:n]
	r.signalAll(syscall.SIGKILL, -1)
	for range n {
		<-r.exits
	}
	r.killGroups()
	return fmt.Errorf("launch: starting %s (%d of %d processes): %w", failed, n+1, len(cmds), err)
}

// stream returns the writer for one of a PE's output streams.
func (r *runner) stream(p *pe, w io.Writer, rank int) io.Writer {
	if r.job.TagOutput {
		lw := newLineWriter("["+strconv.Itoa(rank)+"] ", lockedWriter{r.out, w})
		p.flush = append(p.flush, lw)
		return lw
	}
	if f, ok := w.(*os.File); ok {
		return f // the PE writes to the file itself
	}
	return lockedWriter{r.out, w}
}

// signalAll signals the process group of every PE not yet reaped,
// except rank skip and spared PEs (for SIGTERM).
func (r *runner) signalAll(sig syscall.Signal, skip int) {
	for _, p := range r.pes {
		if p.exited || (skip >= p.rank && skip < p.rank+p.count) || (sig == syscall.SIGTERM && p.spared) {
			continue
		}
		signalGroup(p.cmd.Process.Pid, sig)
	}
}

// killGroups sends SIGKILL to every PE's process group, reaped or not,
// to end anything a PE left behind. A reaped leader's group id cannot be
// reused while any member of the group is alive.
func (r *runner) killGroups() {
	for _, p := range r.pes {
		signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// wait waits for every PE and decides the job's exit code.
func (r *runner) wait(ctx context.Context) (int, error) {
	var (
		remaining = len(r.pes)
		events    <-chan boot.Event // nil for an agent: the boot server runs elsewhere
		parentC   <-chan struct{}
		ending    bool // the outcome is decided; PEs are being ended
		code      int
		runErr    error
		graceC    <-chan time.Time
		timeoutC  <-chan time.Time
		lostC     <-chan time.Time
		lostRank  = -1
		forwarded = -1 // exit code of a PE killed by the signal we forwarded
		done      = ctx.Done()
		timers    []*time.Timer
		// nojoin is a PE that exited 0 without ever joining (-1: none).
		// Init is collective, so once any PE has joined, the others
		// wait for it in the bootstrap: the job cannot complete.
		nojoin = -1
		joined bool // some PE joined
		// held are failed exits not yet judged. The first failure seen
		// is often a survivor that only noticed a peer's death (exits 7
		// on ErrPeerLost, or its host's agent does) and was reaped
		// first. So failures are held for settleWait, and for as long
		// as a process whose boot connection dropped still runs
		// (at most until lostC); then judge names the likeliest first
		// failure: a death by signal, else the earliest dropped boot
		// connection (a dead PE's drops at its death, a survivor's only
		// when it exits).
		held    []exitHeld
		settleC <-chan time.Time
		settled bool
		lostSeq = map[*pe]int{} // the order in which processes' boot connections dropped
	)
	if r.srv != nil {
		events = r.srv.Events()
	}
	if r.job.Join != nil {
		parentC = r.job.Join.Lost
	}
	after := func(d time.Duration) <-chan time.Time {
		t := time.NewTimer(d)
		timers = append(timers, t)
		return t.C
	}
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()
	if r.job.Timeout > 0 {
		timeoutC = after(r.job.Timeout)
	}
	// end decides the outcome and starts ending the job: SIGTERM now
	// (except to skip), SIGKILL after the grace.
	end := func(c int, err error, skip int) {
		if ending {
			return
		}
		ending, code, runErr = true, c, err
		lostC = nil
		r.signalAll(syscall.SIGTERM, skip)
		graceC = after(r.grace)
		for _, h := range held {
			r.logf("%s %s", r.pes[h.idx].label, h.how)
		}
		held, settleC = nil, nil
	}
	seqOf := func(p *pe) int {
		if n, ok := lostSeq[p]; ok {
			return n
		}
		return math.MaxInt
	}
	// judge ends the job with the held failure that came first, once the
	// settle window has passed and no process whose connection dropped
	// still runs (force: lostC passed, judge now).
	judge := func(force bool) {
		if ending || len(held) == 0 || (!settled && !force) {
			return
		}
		// A death by a signal (not the SIGTERM the launcher sends) is
		// taken before an exit status, which a program picks when it
		// sees an error such as ErrPeerLost; then the order in which
		// the processes' boot connections dropped; then arrival.
		rank := func(h exitHeld) (int, int) {
			sig := 1
			if h.code > codeSignalBase && h.code != codeSignalBase+int(syscall.SIGTERM) {
				sig = 0
			}
			return sig, seqOf(r.pes[h.idx])
		}
		best := 0
		for i, h := range held {
			s1, q1 := rank(h)
			s0, q0 := rank(held[best])
			if s1 < s0 || s1 == s0 && q1 < q0 {
				best = i
			}
		}
		if !force {
			// A running process whose boot connection dropped is the
			// likeliest cause, whatever order the drops were seen in:
			// under load the launcher can read a survivor's drop (at
			// its exit) before that of the peer whose death it saw.
			for q := range lostSeq {
				if !q.exited {
					return // wait for its status
				}
			}
		}
		h := held[best]
		held = append(held[:best:best], held[best+1:]...)
		r.logf("%s %s", r.pes[h.idx].label, h.how)
		end(h.code, nil, -1)
	}
	hold := func(idx int, how string, c int) {
		held = append(held, exitHeld{idx: idx, how: how, code: c})
		if settleC == nil && !settled {
			settleC = after(settleWait)
		}
		judge(false)
	}
	onEvent := func(ev boot.Event) {
		if ending || ev.Rank < 0 || ev.Rank >= len(r.byRank) {
			return
		}
		p := r.byRank[ev.Rank]
		switch ev.Kind {
		case boot.EventJoined:
			p.joined, joined = true, true
			if nojoin >= 0 {
				r.logf("PE %d exited with status 0 without joining the job, and PE %d joined it", nojoin, ev.Rank)
				end(CodeFailure, nil, -1)
			}
		case boot.EventExit:
			if ev.Code != 0 {
				r.logf("PE %d called global exit with code %d", ev.Rank, ev.Code)
			}
			p.spared = true
			end(ev.Code, nil, ev.Rank)
		case boot.EventLost:
			p.lostBye = true
			if _, ok := lostSeq[p]; !ok {
				lostSeq[p] = len(lostSeq)
			}
			if p.exited && !p.failed {
				// It exited 0 (a failure would have ended the job, or
				// been held).
				r.logf("PE %d exited with status 0 without closing its connection to the launcher", ev.Rank)
				end(CodeFailure, nil, -1)
			} else if lostRank < 0 {
				lostRank, lostC = ev.Rank, after(lostWait)
			}
		}
	}
	drainEvents := func() {
		for events != nil {
			select {
			case ev, ok := <-events:
				if !ok {
					events = nil
					return
				}
				onEvent(ev)
			default:
				return
			}
		}
	}

	for remaining > 0 {
		select {
		case rep := <-r.exits:
			// Events sent before the process ended come first: a
			// GlobalExit request precedes the requester's own exit.
			drainEvents()
			remaining--
			p := r.pes[rep.idx]
			p.exited = true
			how, c := describe(rep.state)
			p.failed = c != 0
			if ending {
				// Also name every PE that failed on its own while the
				// job was ending (not one ended by our SIGTERM or the
				// grace SIGKILL): the first failure seen may only be a
				// consequence of another, such as a peer's death.
				if c != 0 && graceC != nil && c != codeSignalBase+int(syscall.SIGTERM) && c != forwarded && !p.spared {
					r.logf("%s %s", p.label, how)
				}
				continue
			}
			switch {
			case c != 0:
				hold(rep.idx, how, c)
			case p.lostBye:
				hold(rep.idx, "exited with status 0 without closing its connection to the launcher", CodeFailure)
			case !p.joined && joined:
				r.logf("%s exited with status 0 without joining the job, which other PEs joined", p.label)
				end(CodeFailure, nil, -1)
			case !p.joined && nojoin < 0:
				nojoin = p.rank
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			onEvent(ev)
		case <-settleC:
			settleC, settled = nil, true
			judge(false)
		case <-lostC:
			if len(held) > 0 {
				// The lost PE is still running: the held failure that
				// came first stands, and the loss is reported after it.
				lr := lostRank
				judge(true)
				r.logf("PE %d lost its connection to the launcher", lr)
				continue
			}
			r.logf("PE %d lost its connection to the launcher", lostRank)
			end(CodeFailure, nil, -1)
		case sig := <-r.job.Signals:
			if ending {
				r.logf("received %v while ending the job; killing every PE", sig)
				r.signalAll(syscall.SIGKILL, -1)
				continue
			}
			s := sysSignal(sig)
			r.logf("received %v; forwarding it to every PE", sig)
			ending, code, forwarded = true, codeSignalBase+int(s), codeSignalBase+int(s)
			lostC = nil
			r.signalAll(s, -1)
			graceC = after(r.grace)
		case <-parentC:
			parentC = nil
			if !ending {
				r.logf("lost the connection to the launcher that started this host's PEs; ending them")
				end(CodeFailure, nil, -1)
			}
		case <-timeoutC:
			r.logf("job timed out after %v; killing it", r.job.Timeout)
			end(CodeTimeout, nil, -1)
		case <-done:
			done = nil
			end(CodeFailure, fmt.Errorf("launch: job ended: %w", context.Cause(ctx)), -1)
		case <-graceC:
			graceC = nil
			r.signalAll(syscall.SIGKILL, -1)
		}
	}
	judge(true) // every process has ended within the settle window
	r.killGroups()
	return code, runErr
}
