package suite

import (
	"fmt"
	"slices"
	"strings"
)

// Suite is one entry of the registry: a named benchmark that a job runs
// on every PE (SPMD), once per size when Sized.
//
// Adding a suite is a few lines in a file of this package:
//
//	func init() {
//		Register(&Suite{Name: "broadcast", Group: "collectives", Sized: true,
//			Doc: "osu_oshm_broadcast: root 0 broadcasts size bytes; latency per call",
//			Run: func(b *B, size int) error {
//				return b.figure(figure{suite: "broadcast", size: size, metric: report.Latency,
//					run: func(n int) (sample, error) { ... n broadcasts, timed on PE 0 ... },
//					limit: b.copyLimit(size, false)})
//			}})
//	}
//
// Run is called by every PE of the job with the same arguments, and
// must make the same collective calls on every PE (b.figure does).
type Suite struct {
	Name  string // as in -suites and in the records' "suite"
	Group string // rma, atomics, sync, collectives, ring, comm, limits
	Doc   string // the definition in one line (and the OSU benchmark it mirrors)
	Sized bool   // runs once per -sizes entry; otherwise once, at its own size
	// DefaultSizes, for a Sized suite, are the sizes it runs at when the
	// command line chose none (no -sizes, no -quick); nil: the job's
	// default sizes.
	DefaultSizes []int
	// Pair marks the OSU pairwise benchmarks (PE 0 against PE 1): they
	// run in 2-PE jobs only. Other suites run at every PE count.
	Pair bool
	// Missing, when set, says why the suite cannot run in this build
	// ("not available until collective/ lands"); Run is nil then.
	Missing string
	// Default: part of the default selection.
	Default bool
	Run     func(b *B, size int) error
}

var registry []*Suite

// Register adds s to the registry. Names are unique.
func Register(s *Suite) {
	if s.Name == "" || strings.ContainsAny(s.Name, ", ") || Lookup(s.Name) != nil {
		panic(fmt.Sprintf("suite: bad or duplicate suite name %q", s.Name))
	}
	if (s.Run == nil) == (s.Missing == "") {
		panic(fmt.Sprintf("suite: %s must have exactly one of Run and Missing", s.Name))
	}
	registry = append(registry, s)
	slices.SortStableFunc(registry, func(a, b *Suite) int { return groupRank(a.Group) - groupRank(b.Group) })
}

// groupOrder is the order in which groups run and are listed; a group
// not named here comes last.
var groupOrder = []string{"limits", "rma", "atomics", "sync", "collectives", "ring", "comm"}

func groupRank(g string) int {
	if i := slices.Index(groupOrder, g); i >= 0 {
		return i
	}
	return len(groupOrder)
}

// All lists the registry: by group (groupOrder), then in registration
// order.
func All() []*Suite { return slices.Clone(registry) }

// Lookup finds a suite by name, or nil.
func Lookup(name string) *Suite {
	for _, s := range registry {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Groups lists the group names.
func Groups() []string {
	var gs []string
	for _, s := range registry {
		if !slices.Contains(gs, s.Group) {
			gs = append(gs, s.Group)
		}
	}
	return gs
}

// Select resolves a -suites value: a comma-separated list of suite
// names, group names, "default" (every default suite) and "all". The
// result keeps registry order and has no duplicates.
func Select(spec string) ([]*Suite, error) {
	want := map[*Suite]bool{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		found := false
		for _, s := range registry {
			if item == "all" || s.Name == item || s.Group == item || (item == "default" && s.Default) {
				want[s], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("goshbench: no suite or group %q (goshbench -list shows them)", item)
		}
	}
	var out []*Suite
	for _, s := range registry {
		if want[s] {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("goshbench: -suites %q selects nothing", spec)
	}
	return out, nil
}

// RunsAt reports whether the suite runs in a job of npes PEs.
func (s *Suite) RunsAt(npes int) bool {
	return s.Missing == "" && npes >= 2 && (!s.Pair || npes == 2)
}
