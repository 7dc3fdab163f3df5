package engine

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goshmem/goshmem/internal/errs"
)

// maxList bounds the Slurm lists parsed here.
const maxList = 64 << 10

// FirstHost returns the first host of a Slurm hostlist expression:
// "node[03-05,9],gpu1" gives "node03", "a,b" gives "a", and
// "rack[1-2]-n[7-8]" gives "rack1-n7".
func FirstHost(list string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("engine: hostlist %.80q: %s: %w", list, why, errs.Invalid)
	}
	if len(list) > maxList {
		return bad("too long")
	}
	var b strings.Builder
	for i := 0; i < len(list); i++ {
		switch c := list[i]; c {
		case ',':
			if b.Len() == 0 {
				return bad("empty host name")
			}
			return b.String(), nil
		case '[':
			end := strings.IndexByte(list[i:], ']')
			if end < 0 {
				return bad("unclosed [")
			}
			inner := list[i+1 : i+end]
			first, _, _ := strings.Cut(inner, ",")
			lo, _, _ := strings.Cut(first, "-")
			if lo == "" || strings.Trim(lo, "0123456789") != "" {
				return bad("range " + strconv.Quote(inner))
			}
			b.WriteString(lo)
			i += end
		case ']':
			return bad("unopened ]")
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		return bad("empty")
	}
	return b.String(), nil
}

// TasksPerNode expands SLURM_STEP_TASKS_PER_NODE ("2(x3),1": three nodes
// of two tasks, then one of one) into one count per node.
func TasksPerNode(s string) ([]int, error) {
	bad := func(why string) ([]int, error) {
		return nil, fmt.Errorf("engine: SLURM_STEP_TASKS_PER_NODE=%.80q: %s: %w", s, why, errs.Invalid)
	}
	if s == "" || len(s) > maxList {
		return bad("empty or too long")
	}
	var out []int
	for _, item := range strings.Split(s, ",") {
		count, rep := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return bad("item " + strconv.Quote(item))
			}
			count, rep = item[:i], item[i+2:len(item)-1]
		}
		c, err := strconv.Atoi(count)
		if err != nil || c < 1 || c > 1<<20 {
			return bad("task count " + strconv.Quote(count))
		}
		r, err := strconv.Atoi(rep)
		if err != nil || r < 1 || r > 1<<20 || len(out)+r > 1<<20 {
			return bad("repeat " + strconv.Quote(rep))
		}
		for range r {
			out = append(out, c)
		}
	}
	return out, nil
}
