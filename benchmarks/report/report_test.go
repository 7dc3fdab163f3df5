package report

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in          []float64
		med, lo, hi float64
		outliers    []float64
	}{
		{[]float64{5}, 5, 5, 5, nil},
		{[]float64{3, 1, 2}, 2, 1, 3, nil},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4, nil},
		// One repetition hit by a burst of load: reported, kept in max.
		{[]float64{100, 101, 99, 100, 250}, 100, 99, 250, []float64{250}},
		// Spread within 5% of the median is never an outlier.
		{[]float64{100, 100, 100, 100, 104}, 100, 100, 104, nil},
	} {
		st := Summarize(c.in)
		if st.Median != c.med || st.Min != c.lo || st.Max != c.hi || !slices.Equal(st.Outliers, c.outliers) {
			t.Errorf("Summarize(%v) = %+v; want median %v, min %v, max %v, outliers %v", c.in, st, c.med, c.lo, c.hi, c.outliers)
		}
	}
}

func good() Record {
	return Record{Suite: "put-latency", Transport: "shm", PEs: 2, Size: 8, Metric: Latency, Value: 40, Unit: "ns",
		LimitName: "copy", Limit: 4, Ratio: 0.1, Min: 38, Max: 45}
}

func TestValidate(t *testing.T) {
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	bw := Record{Suite: "put-bw", Transport: "shm", PEs: 2, Size: 1 << 20, Metric: Bandwidth, Value: 18, Unit: "GB/s",
		LimitName: "copy", Limit: 20, Ratio: 0.9, Min: 17, Max: 19}
	if err := bw.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Record){
		"unit of another metric": func(r *Record) { r.Unit = "GB/s" },
		"unknown metric":         func(r *Record) { r.Metric = "throughput" },
		"ratio upside down":      func(r *Record) { r.Ratio = 10 },
		"value outside min-max":  func(r *Record) { r.Min = 41 },
		"no limit name":          func(r *Record) { r.LimitName = "" },
		"NaN":                    func(r *Record) { r.Value = math.NaN() },
		"zero limit":             func(r *Record) { r.Limit = 0 },
		"no PEs":                 func(r *Record) { r.PEs = 0 },
	} {
		r := good()
		mutate(&r)
		if r.Validate() == nil {
			t.Errorf("%s: Validate accepted %+v", name, r)
		}
	}
}

func TestSummarise(t *testing.T) {
	m := Measurement{Suite: "put-bw", Transport: "shm", PEs: 2, Size: 4096, Metric: Bandwidth,
		Samples: []float64{10, 12, 11}, LimitName: "copy", LimitSamples: []float64{20, 22, 24}, Iters: 100}
	f, err := Summarise(m)
	if err != nil {
		t.Fatal(err)
	}
	if f.Value != 11 || f.Limit != 22 || f.Ratio != 0.5 || f.Min != 10 || f.Max != 12 || f.Unit != "GB/s" {
		t.Errorf("Summarise = %+v", f.Record)
	}
	m.LimitSamples = nil
	if _, err := Summarise(m); err == nil {
		t.Error("a figure without a limit was accepted")
	}
}

func TestNames(t *testing.T) {
	names := map[int]string{0: "0B", 8: "8B", 1000: "1000B", 4096: "4KiB", 1 << 20: "1MiB"}
	if g := int64(3) << 30; g <= math.MaxInt { // not on a 32-bit machine
		names[int(g)] = "3GiB"
	}
	for n, want := range names {
		if got := SizeString(n); got != want {
			t.Errorf("SizeString(%d) = %q, want %q", n, got, want)
		}
	}
	r := good()
	r.Suite = "fetch-add"
	if got, want := BenchName(r), "BenchmarkFetchAdd/metric=latency/transport=shm/pes=2/size=8B"; got != want {
		t.Errorf("BenchName = %q, want %q", got, want)
	}
	for _, c := range []struct {
		m    Metric
		v    float64
		want string
	}{{Latency, 35.24, "35.2 ns"}, {Latency, 41600, "41.60 µs"}, {Latency, 5.41e6, "5.41 ms"},
		{Bandwidth, 2.26, "2.26 GB/s"}, {Rate, 26.3, "26.3 Mops/s"}, {Rate, 0.09, "90.0 Kops/s"}} {
		if got := ValueString(c.m, c.v); got != c.want {
			t.Errorf("ValueString(%s, %v) = %q, want %q", c.m, c.v, got, c.want)
		}
	}
}

func TestOutputs(t *testing.T) {
	f := Figure{Record: good(), Samples: []float64{38, 40, 45}, LimitSamples: []float64{4, 4, 4.2}, Iters: 1000,
		Outliers: []float64{45}}
	run := Run{Command: "goshbench", Timestamp: "2025-01-01T00:00:00Z", GoVersion: "go1.26", CPU: "AMD EPYC", Cores: 2,
		Threads: 2, Reps: 3, Skipped: []Skip{{"transport tcp", "not available until netmesh lands"}}}
	var tab bytes.Buffer
	if err := WriteTable(&tab, run, []Figure{f}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"put-latency", "40.0 ns", "copy", "0.100", "45.0", "transport tcp: not available"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	var bench bytes.Buffer
	if err := WriteBench(&bench, run, []Figure{f}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(bench.String(), "BenchmarkPutLatency/"); n != 3 {
		t.Errorf("%d benchmark lines, want one per repetition (3):\n%s", n, bench.String())
	}
	if !strings.Contains(bench.String(), "BenchmarkPutLatency/metric=latency/transport=shm/pes=2/size=8B\t1000\t38 ns/op\t0.105263 x-limit") {
		t.Errorf("first repetition's line is wrong:\n%s", bench.String())
	}
}

// A figure held to a further limit: summarised like the limit, shown
// under the figure in the table, and written to run.extra_limits as a
// record of the same schema.
func TestExtraLimit(t *testing.T) {
	m := Measurement{Suite: "ring-rate", Transport: "shm", PEs: 2, Size: 64, Metric: Rate,
		Samples: []float64{5, 6, 7}, LimitName: "putsignal", LimitSamples: []float64{3, 3, 4}, Iters: 100,
		Extra: []ExtraMeasurement{{Name: "copy", Samples: []float64{60, 50, 70}, Iters: 1000}}}
	f, err := Summarise(m)
	if err != nil {
		t.Fatal(err)
	}
	if f.Ratio != 2 || len(f.Extra) != 1 {
		t.Fatalf("Summarise = %+v", f)
	}
	e := f.Extra[0]
	if e.LimitName != "copy" || e.Limit != 60 || e.Ratio != 0.1 || e.Value != 6 || e.Min != 5 || e.Max != 7 || e.Key() != f.Key() {
		t.Errorf("extra limit %+v", e)
	}
	var tab bytes.Buffer
	if err := WriteTable(&tab, Run{Reps: 3}, []Figure{f}); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`ring-rate .* putsignal .* 2\.000 .*\n +and +copy +60\.0 Mops/s +0\.100`).MatchString(tab.String()) {
		t.Errorf("table:\n%s", tab.String())
	}
	path := filepath.Join(t.TempDir(), "out.json")
	if err := WriteJSON(path, Run{}, []Figure{f}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file File
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Records) != 1 || len(file.Run.ExtraLimits) != 1 || file.Run.ExtraLimits[0] != e {
		t.Errorf("JSON: records %+v, extra limits %+v", file.Records, file.Run.ExtraLimits)
	}
	m.Extra[0].Samples = nil
	if _, err := Summarise(m); err == nil {
		t.Error("an extra limit without repetitions was accepted")
	}
}
