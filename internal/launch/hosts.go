package launch

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// Host is one host of a job across hosts and how many PEs run there.
type Host struct {
	Name string
	N    int
}

// ParseHosts reads "h1:2,h2:1,h3" (a host without a count runs one PE).
func ParseHosts(s string) ([]Host, error) {
	var hs []Host
	for _, item := range strings.Split(s, ",") {
		name, count, has := strings.Cut(item, ":")
		n := 1
		if has {
			v, err := strconv.Atoi(count)
			if err != nil || v < 1 || v > 1<<16 {
				return nil, fmt.Errorf("launch: host %q: want NAME:COUNT with COUNT >= 1: %w", item, errs.Invalid)
			}
			n = v
		}
		if name == "" || strings.ContainsAny(name, " \t\n'\"") {
			return nil, fmt.Errorf("launch: host name %q in %q: %w", name, s, errs.Invalid)
		}
		hs = append(hs, Host{Name: name, N: n})
	}
	return hs, nil
}

// Agent flags: goshrun started with AgentFlag runs one host's PEs of a
// job across hosts (cmd/goshrun reads them; hosts.go writes them). The
// job key comes on the agent's standard input, one line of hex, so it
// is on no command line; the agent then keeps reading, and end of file
// means the launcher that started it is gone.
const (
	AgentFlag     = "agent-job"   // the job id
	AgentFirstArg = "agent-first" // the host's first rank
	AgentSizeArg  = "agent-size"  // the job's size
)

func (j *Job) validateRemote() error {
	total := 0
	for _, h := range j.Remote {
		if h.N < 1 || h.Name == "" {
			return fmt.Errorf("launch: host %q with %d PEs: %w", h.Name, h.N, errs.Invalid)
		}
		total += h.N
	}
	switch {
	case j.N != total:
		return fmt.Errorf("launch: %d PEs, but the hosts add up to %d: %w", j.N, total, errs.Invalid)
	case j.Hosts != nil:
		return fmt.Errorf("launch: a host list (GOSHMEM_HOST per rank) and remote hosts together: %w", errs.Invalid)
	case j.Join != nil:
		return fmt.Errorf("launch: an agent cannot start agents: %w", errs.Invalid)
	}
	return nil
}

// startHosts starts one agent per host through the remote shell: rsh
// HOST goshrun --agent-job ID --agent-first F --agent-size N
// --rendezvous ADDR -n COUNT [flags] -- PROGRAM ARGS, with the key on
// its standard input. The agent's output passes through untouched (it
// tags its own lines).
func (r *runner) startHosts(bin, jobID string, key []byte, rendezvous string) error {
	j := r.job
	self := j.Self
	if self == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("launch: finding goshrun's own binary for the hosts: %w", err)
		}
		self = exe
	}
	rsh := j.Rsh
	if len(rsh) == 0 {
		rsh = []string{"ssh"}
	}
	quote := filepath.Base(rsh[0]) == "ssh" // ssh hands the remote shell one string
	var cmds []*exec.Cmd
	var keys []io.WriteCloser
	first := 0
	for _, h := range j.Remote {
		args := []string{self, "--" + AgentFlag, jobID, "--" + AgentFirstArg, strconv.Itoa(first),
			"--" + AgentSizeArg, strconv.Itoa(j.N), "--rendezvous", rendezvous, "-n", strconv.Itoa(h.N),
			"--grace", r.grace.String()}
		if j.TagOutput {
			args = append(args, "--tag-output")
		}
		if j.Timeout > 0 {
			args = append(args, "--timeout", (j.Timeout + 5*time.Second).String()) // the launcher's own limit comes first
		}
		for _, kv := range j.Env {
			args = append(args, "--env", kv)
		}
		args = append(append(args, "--", bin), j.Args...)
		if quote {
			for i, a := range args {
				args[i] = shellQuote(a)
			}
		}
		argv := append(append(append([]string(nil), rsh[1:]...), h.Name), args...)
		cmd := exec.Command(rsh[0], argv...)
		w, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		keys = append(keys, w)
		cmd.WaitDelay = max(r.grace, 200*time.Millisecond)
		label := fmt.Sprintf("host %s (PE %d)", h.Name, first)
		if h.N > 1 {
			label = fmt.Sprintf("host %s (PEs %d-%d)", h.Name, first, first+h.N-1)
		}
		p := &pe{rank: first, count: h.N, label: label, cmd: cmd}
		cmd.Stdout = r.untagged(r.out.stdout)
		cmd.Stderr = r.untagged(r.out.stderr)
		cmds = append(cmds, cmd)
		r.pes = append(r.pes, p)
		first += h.N
	}
	if err := r.launch(cmds); err != nil {
		return err
	}
	line := []byte(hex.EncodeToString(key) + "\n")
	for _, w := range keys {
		// The pipe stays open for the job: its end tells the agent the
		// launcher is gone. A failed write shows as that agent's exit.
		w.Write(line)
	}
	r.agentKeys = keys
	return nil
}

// untagged is the writer for an agent's output stream.
func (r *runner) untagged(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return lockedWriter{r.out, w}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ReadAgentKey reads the job key an agent gets on its standard input and
// returns a channel closed when the input ends (the launcher that
// started the agent is gone).
func ReadAgentKey(in io.Reader) (key []byte, lost <-chan struct{}, err error) {
	var line []byte
	b := make([]byte, 1)
	for len(line) <= 2*32 {
		n, err := in.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("launch: agent: reading the job key from standard input: %w", err)
		}
	}
	key, err = hex.DecodeString(string(line))
	if err != nil || len(key) != 32 {
		return nil, nil, fmt.Errorf("launch: agent: standard input does not start with the job key: %w", errs.Invalid)
	}
	c := make(chan struct{})
	go func() {
		io.Copy(io.Discard, in)
		close(c)
	}()
	return key, c, nil
}
