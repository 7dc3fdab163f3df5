package engine

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goshmem/goshmem/internal/errs"
)

// PMI-1 wire protocol (the "simple" PMI of MPICH, also served by Slurm's
// mpi/pmi2 plugin): one request line, one reply line, each a list of
// key=value words separated by spaces and ended by '\n'. The requests
// used here and their replies:
//
//	cmd=initack pmiid=ID                   (PMI_PORT only, first)  cmd=initack, then cmd=set size=N, cmd=set rank=R, cmd=set debug=D
//	cmd=init pmi_version=1 pmi_subversion=1                         cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0
//	cmd=get_maxes                                                   cmd=maxes kvsname_max=K keylen_max=L vallen_max=V rc=0
//	cmd=get_my_kvsname                                              cmd=my_kvsname kvsname=NAME rc=0
//	cmd=put kvsname=NAME key=K value=V                              cmd=put_result rc=0 msg=success
//	cmd=barrier_in                                                  cmd=barrier_out
//	cmd=get kvsname=NAME key=K                                      cmd=get_result rc=0 value=V  (rc!=0: msg=...)
//	cmd=finalize                                                    cmd=finalize_ack
//
// A value holds no space, '=' or newline; the values goshmem puts are
// host:port addresses.

// maxPMILine bounds one reply line (servers' own limits are about 1 KiB
// for values).
const maxPMILine = 4096

// PMIReply is one parsed reply line: its words as key=value pairs.
type PMIReply map[string]string

// ParsePMIReply parses one reply line (without its newline). Every word
// must be key=value with a non-empty key; the line must have a cmd. It
// never panics; an error wraps errs.Protocol.
func ParsePMIReply(line string) (PMIReply, error) {
	if len(line) > maxPMILine {
		return nil, fmt.Errorf("engine: PMI reply of %d bytes, limit %d: %w", len(line), maxPMILine, errs.Protocol)
	}
	m := PMIReply{}
	for _, w := range strings.Fields(line) {
		k, val, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("engine: PMI reply %.80q: word %.40q is not key=value: %w", line, w, errs.Protocol)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("engine: PMI reply %.80q: %q twice: %w", line, k, errs.Protocol)
		}
		m[k] = val
	}
	if m["cmd"] == "" {
		return nil, fmt.Errorf("engine: PMI reply %.80q has no cmd: %w", line, errs.Protocol)
	}
	return m, nil
}

// rc is the reply's return code (0 when it has none).
func (r PMIReply) rc() int {
	s, ok := r["rc"]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// PMIClient is a PMI-1 client. Its calls run one at a time.
type PMIClient struct {
	nc      net.Conn
	r       *bufio.Reader
	Rank    int
	Size    int
	KVSName string
	valMax  int
}

// DialPMI connects to the engine's PMI server (PMI_FD, or PMI_PORT with
// PMI_ID) and runs init, get_maxes and get_my_kvsname. Rank and Size
// come from e, or from the server with PMI_PORT.
func DialPMI(ctx context.Context, e *Engine) (*PMIClient, error) {
	c := &PMIClient{Rank: e.Rank, Size: e.Size}
	switch {
	case e.PMIFD >= 0:
		f := os.NewFile(uintptr(e.PMIFD), "PMI_FD")
		nc, err := net.FileConn(f) // a duplicate, non-blocking: deadlines work
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("engine: PMI_FD=%d is not a socket: %v: %w", e.PMIFD, err, errs.Invalid)
		}
		c.nc = nc
	case e.PMIPort != "":
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", e.PMIPort)
		if err != nil {
			return nil, fmt.Errorf("engine: dialing PMI_PORT=%s: %w", e.PMIPort, err)
		}
		c.nc = nc
	default:
		return nil, fmt.Errorf("engine: no PMI server (PMI_FD or PMI_PORT): %w", errs.Invalid)
	}
	c.r = bufio.NewReaderSize(c.nc, maxPMILine+1)
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := c.init(ctx, e); err != nil {
		c.nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *PMIClient) init(ctx context.Context, e *Engine) error {
	if e.PMIFD < 0 {
		if err := c.send("cmd=initack pmiid=" + strconv.Itoa(e.PMIID)); err != nil {
			return c.wrap(ctx, "initack", err)
		}
		if _, err := c.expect("initack"); err != nil {
			return c.wrap(ctx, "initack", err)
		}
		for range 3 {
			r, err := c.expect("set")
			if err != nil {
				return c.wrap(ctx, "initack", err)
			}
			for k, v := range r {
				switch k {
				case "size":
					c.Size, err = parseNum("PMI size", v)
				case "rank":
					c.Rank, err = parseNum("PMI rank", v)
				}
				if err != nil {
					return err
				}
			}
		}
		if err := checkRank("PMI server", c.Rank, c.Size); err != nil {
			return err
		}
	}
	r, err := c.call("init pmi_version=1 pmi_subversion=1", "response_to_init")
	if err != nil {
		return c.wrap(ctx, "init", err)
	}
	if r["pmi_version"] != "1" {
		return fmt.Errorf("engine: PMI server speaks version %q, want 1: %w", r["pmi_version"], errs.Protocol)
	}
	if r, err = c.call("get_maxes", "maxes"); err != nil {
		return c.wrap(ctx, "get_maxes", err)
	}
	c.valMax, _ = strconv.Atoi(r["vallen_max"])
	if r, err = c.call("get_my_kvsname", "my_kvsname"); err != nil {
		return c.wrap(ctx, "get_my_kvsname", err)
	}
	if c.KVSName = r["kvsname"]; c.KVSName == "" {
		return fmt.Errorf("engine: PMI server gave an empty KVS name: %w", errs.Protocol)
	}
	return nil
}

func (c *PMIClient) wrap(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("engine: PMI %s: %w: %w", what, err, errs.Timeout)
	}
	return fmt.Errorf("engine: PMI %s: %w", what, err)
}

func (c *PMIClient) send(line string) error {
	_, err := c.nc.Write([]byte(line + "\n"))
	return err
}

// expect reads one reply and checks its cmd.
func (c *PMIClient) expect(cmd string) (PMIReply, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("PMI reply longer than %d bytes: %w", maxPMILine, errs.Protocol)
		}
		return nil, fmt.Errorf("reading the PMI server's reply: %w", err)
	}
	r, err := ParsePMIReply(strings.TrimRight(string(line), "\r\n"))
	if err != nil {
		return nil, err
	}
	if r["cmd"] != cmd {
		return nil, fmt.Errorf("PMI server answered cmd=%s, want cmd=%s: %w", r["cmd"], cmd, errs.Protocol)
	}
	return r, nil
}

func (c *PMIClient) call(req, reply string) (PMIReply, error) {
	if err := c.send("cmd=" + req); err != nil {
		return nil, err
	}
	r, err := c.expect(reply)
	if err != nil {
		return nil, err
	}
	if rc := r.rc(); rc != 0 {
		return r, fmt.Errorf("PMI %s failed: rc=%d %s", req, rc, r["msg"])
	}
	return r, nil
}

func checkWord(what, s string) error {
	if s == "" || strings.ContainsAny(s, " =\n\r\t") {
		return fmt.Errorf("engine: PMI %s %q must be one word without '=': %w", what, s, errs.Invalid)
	}
	return nil
}

// Put stores key=value in the job's KVS (visible to others after the
// next Barrier).
func (c *PMIClient) Put(ctx context.Context, key, value string) error {
	if err := checkWord("key", key); err != nil {
		return err
	}
	if err := checkWord("value", value); err != nil {
		return err
	}
	if c.valMax > 0 && len(value) > c.valMax {
		return fmt.Errorf("engine: PMI value of %d bytes, the server's limit is %d: %w", len(value), c.valMax, errs.Invalid)
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_, err := c.call("put kvsname="+c.KVSName+" key="+key+" value="+value, "put_result")
	return c.wrapDone(ctx, "put", err)
}

// Barrier waits for every PE of the job to enter it.
func (c *PMIClient) Barrier(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_, err := c.call("barrier_in", "barrier_out")
	return c.wrapDone(ctx, "barrier", err)
}

// Get fetches key from the job's KVS.
func (c *PMIClient) Get(ctx context.Context, key string) (string, error) {
	if err := checkWord("key", key); err != nil {
		return "", err
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	r, err := c.call("get kvsname="+c.KVSName+" key="+key, "get_result")
	if err != nil {
		return "", c.wrapDone(ctx, "get "+key, err)
	}
	return r["value"], nil
}

func (c *PMIClient) wrapDone(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	c.nc.SetDeadline(time.Time{})
	return c.wrap(ctx, what, err)
}

// Finalize tells the server this PE is done with PMI (bounded by a
// short deadline) and closes the connection.
func (c *PMIClient) Finalize() error {
	c.nc.SetDeadline(time.Now().Add(2 * time.Second))
	_, err := c.call("finalize", "finalize_ack")
	c.nc.Close()
	return err
}

// Close closes the connection without finalizing.
func (c *PMIClient) Close() error { return c.nc.Close() }
