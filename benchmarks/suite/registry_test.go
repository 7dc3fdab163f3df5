package suite

import (
	"math"
	"slices"
	"testing"

	"github.com/goshmem/goshmem/benchmarks/report"
)

func names(ss []*Suite) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

func TestSelect(t *testing.T) {
	for spec, want := range map[string][]string{
		"barrier":               {"barrier"},
		"waituntil,put-latency": {"put-latency", "waituntil"}, // registry order, not the spec's
		"sync":                  {"barrier", "waituntil", "waituntil-vector"},
		"atomics,fetch-add": {"fetch-add", "add", "inc", "fetch-inc", "compare-swap", "swap", "fetch",
			"fetch-float64", "swap-float64", "fetch-float32", "swap-float32", "fetch-uint32", "swap-uint32"},
		"limits, put-rate , ,": {"limits", "put-rate"},
		"collectives":          {"broadcast", "reduce", "allreduce", "fcollect", "alltoall"},
		"ring":                 {"ring-latency", "ring-rate", "ring-rate-all"},
	} {
		got, err := Select(spec)
		if err != nil || len(got) != len(want) {
			t.Errorf("Select(%q) = %v, %v; want %v", spec, names(got), err, want)
			continue
		}
		for i := range want {
			if got[i].Name != want[i] {
				t.Errorf("Select(%q) = %v; want %v", spec, names(got), want)
				break
			}
		}
	}
	for _, bad := range []string{"nope", "", ","} {
		if _, err := Select(bad); err == nil {
			t.Errorf("Select(%q) accepted", bad)
		}
	}
	all, _ := Select("all")
	def, _ := Select("default")
	if len(all) != len(registry) || len(def) != len(registry) {
		t.Errorf("all selects %d, default %d, registry has %d", len(all), len(def), len(registry))
	}
	// Groups run in groupOrder whatever the file order.
	last := -1
	for _, s := range registry {
		if r := groupRank(s.Group); r < last {
			t.Errorf("%s (group %s) comes after a later group", s.Name, s.Group)
		} else {
			last = r
		}
	}
}

func TestRunsAt(t *testing.T) {
	pair, every, coll := Lookup("put-latency"), Lookup("barrier"), Lookup("broadcast")
	ringLat, ringAll := Lookup("ring-latency"), Lookup("ring-rate-all")
	for _, c := range []struct {
		s    *Suite
		npes int
		want bool
	}{{pair, 2, true}, {pair, 4, false}, {every, 2, true}, {every, 4, true}, {every, 1, false}, {coll, 2, true}, {coll, 4, true},
		{ringLat, 2, true}, {ringLat, 4, false}, {ringAll, 4, true}} {
		if got := c.s.RunsAt(c.npes); got != c.want {
			t.Errorf("%s.RunsAt(%d) = %v, want %v", c.s.Name, c.npes, got, c.want)
		}
	}
}

func TestSampleValue(t *testing.T) {
	s := sample{ns: 2000, ops: 100, bytes: 100 * 4096}
	for m, want := range map[report.Metric]float64{
		report.Latency:   20,    // ns per op
		report.Bandwidth: 204.8, // bytes per ns = GB/s
		report.Rate:      50,    // ops per µs = Mops/s
	} {
		if got := s.value(m); math.Abs(got-want) > 1e-9 {
			t.Errorf("value(%s) = %v, want %v", m, got, want)
		}
	}
}

func TestConfig(t *testing.T) {
	c := Config{Transport: "shm", Suites: []string{"barrier"}, Sizes: []int{8, 4 << 20}, Reps: 1,
		RepTime: DefaultRepTime, Window: 1, Timeout: 1, Bind: BindCPU}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MaxSize() != 4<<20 || c.HeapBytes(4)%(1<<20) != 0 || c.HeapBytes(4) < 4<<20+4*slotBytes {
		t.Errorf("MaxSize %d, HeapBytes %d", c.MaxSize(), c.HeapBytes(4))
	}
	// A ring suite adds one figure's lanes and baseline buffer: at its
	// own largest size, 256 KiB, 8 bulk areas and the buffer; at 4 MiB
	// (-sizes), 4 bulk areas and the buffer.
	plain := c.HeapBytes(2)
	c.Suites = []string{"barrier", "ring-rate"}
	if got := c.HeapBytes(2); got < plain+9*(256<<10) || got%(1<<20) != 0 {
		t.Errorf("HeapBytes with a ring suite %d, without %d", got, plain)
	}
	c.SizesGiven = true
	if got := c.HeapBytes(2); got < plain+5*(4<<20) || got%(1<<20) != 0 {
		t.Errorf("HeapBytes with a ring suite at -sizes 8,4M: %d, without %d", got, plain)
	}
	c.SizesGiven = false
	// The ring suites run at their own sizes unless the command line
	// chose sizes; other suites always at the job's.
	rr, pl := Lookup("ring-rate"), Lookup("put-latency")
	if got := c.SizesFor(rr); !slices.Equal(got, ringSizes) {
		t.Errorf("ring-rate without -sizes: %v, want %v", got, ringSizes)
	}
	if got := c.SizesFor(pl); !slices.Equal(got, c.Sizes) {
		t.Errorf("put-latency: %v, want %v", got, c.Sizes)
	}
	c.SizesGiven = true
	if got := c.SizesFor(rr); !slices.Equal(got, c.Sizes) {
		t.Errorf("ring-rate with -sizes: %v, want %v", got, c.Sizes)
	}
	c.Suites = []string{"nope"}
	if c.Validate() == nil {
		t.Error("unknown suite accepted")
	}
}
