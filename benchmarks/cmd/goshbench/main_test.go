package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goshmem/goshmem/benchmarks/report"
	"github.com/goshmem/goshmem/benchmarks/suite"
)

// The test binary is also the PE program: goshbench re-executes its own
// binary (os.Executable) with GOSHBENCH_PE=1.
func TestMain(m *testing.M) {
	if suite.IsPE() {
		os.Exit(suite.PEMain())
	}
	os.Exit(m.Run())
}

// recordFields is the -json schema of one figure, field by field, with
// the JSON type each must have.
var recordFields = map[string]string{
	"suite": "string", "transport": "string", "pes": "int", "size": "int", "metric": "string",
	"value": "number", "unit": "string", "limit_name": "string", "limit": "number", "ratio": "number",
	"min": "number", "max": "number",
}

var metricUnits = map[string]string{"latency": "ns", "bandwidth": "GB/s", "rate": "Mops/s"}

// checkRecord validates one decoded record against the schema without
// using report.Record, so that a change to the Go type cannot hide a
// change of the file format.
func checkRecord(rec map[string]any) error {
	var errs []error
	for k := range rec {
		if _, ok := recordFields[k]; !ok {
			errs = append(errs, fmt.Errorf("unexpected field %q", k))
		}
	}
	for k, typ := range recordFields {
		v, ok := rec[k]
		if !ok {
			errs = append(errs, fmt.Errorf("missing field %q", k))
			continue
		}
		switch typ {
		case "string":
			if s, ok := v.(string); !ok || s == "" {
				errs = append(errs, fmt.Errorf("%s = %#v: want a non-empty string", k, v))
			}
		case "int":
			if f, ok := v.(float64); !ok || f != math.Trunc(f) || f < 0 {
				errs = append(errs, fmt.Errorf("%s = %#v: want a non-negative integer", k, v))
			}
		case "number":
			if f, ok := v.(float64); !ok || !(f > 0) || math.IsInf(f, 0) {
				errs = append(errs, fmt.Errorf("%s = %#v: want a positive number", k, v))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	metric, unit := rec["metric"].(string), rec["unit"].(string)
	if want, ok := metricUnits[metric]; !ok || unit != want {
		return fmt.Errorf("metric %q with unit %q: want latency/ns, bandwidth/GB/s or rate/Mops/s", metric, unit)
	}
	value, limit, ratio := rec["value"].(float64), rec["limit"].(float64), rec["ratio"].(float64)
	want := value / limit
	if metric == "latency" {
		want = limit / value
	}
	if math.Abs(ratio-want) > 1e-9*want {
		return fmt.Errorf("ratio %v: want %v (%s: %s)", ratio, want, metric,
			map[bool]string{true: "limit/value", false: "value/limit"}[metric == "latency"])
	}
	if lo, hi := rec["min"].(float64), rec["max"].(float64); !(lo <= value && value <= hi) {
		return fmt.Errorf("min %v <= value %v <= max %v does not hold", lo, value, hi)
	}
	return nil
}

// TestQuickRun is what CI runs: goshbench -quick over shared memory and
// TCP with every output, then the JSON of both transports checked
// against the schema, the benchmark lines against
// the Go benchmark format, and the plots for well-formed XML.
func TestQuickRun(t *testing.T) {
	dir := t.TempDir()
	jsonPath, svgDir := filepath.Join(dir, "out.json"), filepath.Join(dir, "svg")
	var stdout, stderr bytes.Buffer
	args := []string{"-quick", "-transport", "shm,tcp", "-json", jsonPath, "-svg", svgDir, "-bench-format"}
	start := time.Now()
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("goshbench %s: exit code %d\nstderr:\n%s", strings.Join(args, " "), code, stderr.String())
	}
	t.Logf("goshbench -quick took %v", time.Since(start))

	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Run     map[string]any   `json:"run"`
		Records []map[string]any `json:"records"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("top level of the JSON is not {\"run\", \"records\"}: %v", err)
	}
	if len(file.Records) == 0 {
		t.Fatal("no records")
	}
	seen := map[string]bool{}
	for i, rec := range file.Records {
		if err := checkRecord(rec); err != nil {
			t.Errorf("record %d %v: %v", i, rec, err)
			continue
		}
		key := fmt.Sprintf("%s|%s|%d|%d|%s", rec["suite"], rec["transport"],
			int(rec["pes"].(float64)), int(rec["size"].(float64)), rec["metric"])
		if seen[key] {
			t.Errorf("record %d duplicates %s", i, key)
		}
		seen[key] = true
	}
	// The strict decoder and the Go type agree with the generic check.
	var typed report.File
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&typed); err != nil {
		t.Fatal(err)
	}
	for _, r := range typed.Records {
		if err := r.Validate(); err != nil {
			t.Error(err)
		}
	}

	// Every available default suite produced its figures, over both
	// transports, each held to its transport's limits.
	var want []string
	for _, tr := range []string{"shm", "tcp"} {
		for _, k := range []string{
			"put-latency|%s|2|8|latency", "put-latency|%s|2|4096|latency", "put-latency|%s|2|1048576|latency",
			"get-latency|%s|2|8|latency", "put-bw|%s|2|1048576|bandwidth", "put-nbi-bw|%s|2|4096|bandwidth",
			"get-bw|%s|2|8|bandwidth", "get-nbi-bw|%s|2|1048576|bandwidth",
			"put-rate|%s|2|8|rate", "put-nbi-rate|%s|2|8|rate", "put-rate-all|%s|2|8|rate", "put-rate-all|%s|4|8|rate",
			"barrier|%s|2|0|latency", "barrier|%s|4|0|latency", "waituntil|%s|2|8|latency",
		} {
			want = append(want, fmt.Sprintf(k, tr))
		}
		for _, op := range []string{"fetch-add", "add", "inc", "fetch-inc", "compare-swap", "swap", "fetch"} {
			want = append(want, op+"|"+tr+"|2|8|latency", op+"|"+tr+"|2|8|rate")
		}
		// The ring suites, at every -quick size (inline, bulk and a
		// message far above the inline limit).
		for _, size := range []int{8, 4096, 1 << 20} {
			want = append(want, fmt.Sprintf("ring-latency|%s|2|%d|latency", tr, size), fmt.Sprintf("ring-rate|%s|2|%d|rate", tr, size),
				fmt.Sprintf("ring-rate-all|%s|2|%d|rate", tr, size), fmt.Sprintf("ring-rate-all|%s|4|%d|rate", tr, size))
			// The comm suites (ring.Comm), eager and rendezvous.
			want = append(want, fmt.Sprintf("comm-latency|%s|2|%d|latency", tr, size), fmt.Sprintf("comm-bw|%s|2|%d|bandwidth", tr, size))
		}
	}
	for _, k := range want {
		if !seen[k] {
			t.Errorf("no record %s", k)
		}
	}
	tcpLimits := map[report.Metric][]string{
		report.Latency:   {"tcp-rtt-poll", "tcp-rtt", "tcp-floor", "tcp-barrier"}, // tcp-rtt: PEs outnumber the CPUs
		report.Bandwidth: {"tcp-stream"},
		report.Rate:      {"tcp-stream-frames"},
	}
	for _, r := range typed.Records {
		isTCP := strings.HasPrefix(r.LimitName, "tcp-")
		switch {
		case strings.HasPrefix(r.Suite, "ring-"):
			// Held to the plain put+signal of the same run; the machine's
			// limit is an extra limit (checked below).
			if r.LimitName != "putsignal" {
				t.Errorf("record %s: a ring figure held to %s, want putsignal", r.Key(), r.LimitName)
			}
		case strings.HasPrefix(r.Suite, "comm-"):
			// Held to the layer below in the same run (a raw lane, or
			// Put); the machine's limit is an extra limit.
			if want := map[report.Metric]string{report.Latency: "ring", report.Bandwidth: "put"}[r.Metric]; r.LimitName != want {
				t.Errorf("record %s: a comm figure held to %s, want %s", r.Key(), r.LimitName, want)
			}
		case r.Transport == "shm" && isTCP:
			t.Errorf("record %s: a shm figure held to %s", r.Key(), r.LimitName)
		case r.Transport == "tcp" && !slices.Contains(tcpLimits[r.Metric], r.LimitName):
			t.Errorf("record %s: a tcp %s held to %s, want one of %v", r.Key(), r.Metric, r.LimitName, tcpLimits[r.Metric])
		case r.Transport == "tcp" && r.Suite == "barrier" && (r.LimitName == "tcp-barrier") != (r.PEs >= 3):
			// The plain-Go barrier of all PEs from 3 PEs on; 2 PEs: tcp-floor.
			t.Errorf("record %s: a %d-PE tcp barrier held to %s", r.Key(), r.PEs, r.LimitName)
		case r.LimitName == "tcp-barrier" && r.Suite != "barrier":
			t.Errorf("record %s: held to tcp-barrier, which only the barrier figure is", r.Key())
		case r.LimitName == "tcp-rtt" && r.PEs <= runtime.NumCPU():
			// The parked round trip only where the PEs outnumber the CPUs.
			t.Errorf("record %s: %d PEs on %d CPUs held to the parked tcp-rtt, want tcp-rtt-poll", r.Key(), r.PEs, runtime.NumCPU())
		}
	}
	// Extra limits: records of the same schema in run.extra_limits, each
	// the figure of a record (same key, value, min and max) held to a
	// further limit. Every ring figure has one: the machine's limit for
	// a message of its size over its transport; so have the allreduce
	// figures over tcp (tcp-ring: the AllReduce's bytes round a ring of
	// plain TCP connections). Over shared memory the pair's rate and
	// bandwidth figures (ring-rate, comm-bw) have a second, copy-stream:
	// plain copies through the mapping, crossing the cores as theirs do.
	rawExtra, _ := file.Run["extra_limits"].([]any)
	if len(rawExtra) != len(typed.Run.ExtraLimits) {
		t.Fatalf("run.extra_limits: %d generic, %d typed", len(rawExtra), len(typed.Run.ExtraLimits))
	}
	for i, x := range rawExtra {
		rec, ok := x.(map[string]any)
		if !ok {
			t.Errorf("run.extra_limits[%d] = %#v: want a record", i, x)
			continue
		}
		if err := checkRecord(rec); err != nil {
			t.Errorf("run.extra_limits[%d] %v: %v", i, rec, err)
		}
	}
	byKey := map[string]report.Record{}
	for _, r := range typed.Records {
		byKey[r.Key()] = r
	}
	extraLimits := map[string][]string{
		"shm latency": {"copy-floor"}, "shm rate": {"copy", "copy-stream"}, "shm bandwidth": {"copy", "copy-stream"},
		"tcp latency": {"tcp-floor", "tcp-ring"}, "tcp rate": {"tcp-stream-frames"}, "tcp bandwidth": {"tcp-stream"},
	}
	extras := map[string]int{}
	for _, e := range typed.Run.ExtraLimits {
		extras[e.Key()]++
		r, ok := byKey[e.Key()]
		switch {
		case !ok:
			t.Errorf("extra limit %s (%s) of no record", e.Key(), e.LimitName)
		case e.Value != r.Value || e.Min != r.Min || e.Max != r.Max || e.LimitName == r.LimitName:
			t.Errorf("extra limit %+v does not describe record %+v under another limit", e, r)
		case !slices.Contains(extraLimits[string(e.Transport)+" "+string(e.Metric)], e.LimitName):
			t.Errorf("extra limit of %s: %s, want one of %v", e.Key(), e.LimitName, extraLimits[e.Transport+" "+string(e.Metric)])
		}
	}
	for _, r := range typed.Records {
		want := 0
		if strings.HasPrefix(r.Suite, "ring-") || strings.HasPrefix(r.Suite, "comm-") ||
			(strings.HasPrefix(r.Suite, "allreduce") && r.Transport == "tcp") {
			want = 1
		}
		if (r.Suite == "ring-rate" || r.Suite == "comm-bw") && r.Transport == "shm" {
			want = 2
		}
		if n := extras[r.Key()]; n != want {
			t.Errorf("record %s has %d extra limits", r.Key(), n)
		}
	}
	if !regexp.MustCompile(`(?m)^ring-latency +shm +2 +8B +latency .* putsignal .*\n +and +copy-floor `).MatchString(stderr.String()) {
		t.Errorf("the table does not show ring-latency at 8 B held to putsignal, then to copy-floor:\n%s", stderr.String())
	}

	// The same-host limits are not measured in tcp jobs, and the run says so.
	for _, npes := range []int{2, 4} {
		for _, name := range []string{"copy-to-mapping", "cacheline-rtt", "copy-stream"} {
			what := fmt.Sprintf("limit %s in the tcp job of %d PEs", name, npes)
			if !slices.ContainsFunc(typed.Run.Skipped, func(s report.Skip) bool {
				return s.What == what && strings.Contains(s.Reason, "same-host only")
			}) {
				t.Errorf("run.skipped has no %q: %+v", what, typed.Run.Skipped)
			}
			if !strings.Contains(stderr.String(), "skipping "+what) {
				t.Errorf("no skip line for %q on stderr", what)
			}
		}
	}

	// The run's description.
	for _, k := range []string{"command", "timestamp", "go_version", "cpu"} {
		if s, _ := file.Run[k].(string); s == "" {
			t.Errorf("run.%s is empty", k)
		}
	}
	if ts, _ := file.Run["timestamp"].(string); ts != "" {
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Errorf("run.timestamp: %v", err)
		}
	}
	if c, _ := file.Run["cores"].(float64); c < 1 {
		t.Errorf("run.cores = %v", file.Run["cores"])
	}
	if len(typed.Run.Jobs) != 4 {
		t.Errorf("%d jobs, want 4 (shm and tcp, at 2 and 4 PEs)", len(typed.Run.Jobs))
	}
	for _, j := range typed.Run.Jobs {
		if len(j.Placement) != j.PEs {
			t.Errorf("job %s/%d: placement of %d PEs", j.Transport, j.PEs, len(j.Placement))
		}
		// Every PE reached every other over the job's transport.
		hosts := map[string]bool{}
		for _, p := range j.Placement {
			hosts[p.Host] = true
			if len(p.Routes) != j.PEs-1 {
				t.Errorf("job %s/%d, PE %d: routes %q", j.Transport, j.PEs, p.PE, p.Routes)
			}
			for _, r := range p.Routes {
				if !strings.Contains(r, ": "+j.Transport) {
					t.Errorf("job %s/%d, PE %d: route %q", j.Transport, j.PEs, p.PE, r)
				}
			}
		}
		if want := map[string]int{"shm": 1, "tcp": j.PEs}[j.Transport]; len(hosts) != want {
			t.Errorf("job %s/%d: PEs on %d hosts, want %d", j.Transport, j.PEs, len(hosts), want)
		}
	}
	limits := map[string]bool{}
	for _, l := range typed.Run.Limits {
		limits[l.Transport+" "+l.Name] = true
		if !(l.Value > 0) || l.Unit != l.Metric.Unit() {
			t.Errorf("limit %+v", l)
		}
	}
	for _, name := range []string{"shm copy", "shm copy-to-mapping", "shm cacheline-rtt", "shm copy-stream", "shm tcp-rtt", "shm tcp-rtt-poll",
		"shm tcp-stream", "tcp copy", "tcp tcp-rtt", "tcp tcp-rtt-poll", "tcp tcp-stream"} {
		if !limits[name] {
			t.Errorf("no reference limit %s", name)
		}
	}
	for _, name := range []string{"tcp copy-to-mapping", "tcp cacheline-rtt", "tcp copy-stream"} {
		if limits[name] {
			t.Errorf("reference limit %s measured in a tcp job", name)
		}
	}
	if !strings.Contains(stderr.String(), "Figures (median of 3 repetitions") {
		t.Errorf("with -bench-format the table goes to stderr; it is not there:\n%s", stderr.String())
	}

	// Benchmark lines: one per repetition of every figure, in the Go
	// benchmark format.
	line := regexp.MustCompile(`^Benchmark[A-Za-z][A-Za-z0-9]*/metric=(latency|bandwidth|rate)/transport=\w+/pes=\d+/size=\w+\t\d+\t\S+ (ns/op|GB/s|Mops/s)\t\S+ x-limit$`)
	benchLines := 0
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if !strings.HasPrefix(l, "Benchmark") {
			continue
		}
		benchLines++
		if !line.MatchString(l) {
			t.Errorf("not a benchmark line: %q", l)
		}
	}
	if want := len(file.Records) * 3; benchLines != want {
		t.Errorf("%d benchmark lines, want %d (3 repetitions of %d figures)", benchLines, want, len(file.Records))
	}

	// Plots: one per sized latency and bandwidth suite, well-formed.
	for _, name := range []string{"put-latency-latency", "get-latency-latency", "put-bw-bandwidth",
		"put-nbi-bw-bandwidth", "get-bw-bandwidth", "get-nbi-bw-bandwidth", "ring-latency-latency"} {
		if _, err := os.Stat(filepath.Join(svgDir, name+".svg")); err != nil {
			t.Errorf("no plot %s.svg: %v", name, err)
		}
	}
	svgs, _ := filepath.Glob(filepath.Join(svgDir, "*.svg"))
	for _, f := range svgs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(bytes.NewReader(b))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Errorf("%s: %v", f, err)
				break
			}
		}
		if !bytes.Contains(b, []byte("stroke-dasharray")) {
			t.Errorf("%s has no limit line", f)
		}
	}
}

// Asking only for what cannot run is an error that says why, and no
// job starts.
func TestNothingToMeasure(t *testing.T) {
	for _, args := range [][]string{
		{"-pes", "4", "-suites", "put-latency,ring-latency,ring-rate", "-quick"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 1 {
			t.Errorf("goshbench %v: exit code %d, want 1\n%s", args, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "nothing to measure") || strings.Contains(stderr.String(), "starting") {
			t.Errorf("goshbench %v: want a refusal before any job:\n%s", args, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("goshbench %v printed a report:\n%s", args, stdout.String())
		}
	}
}

// A netns job asked for where goshbench is not in namespace g1 (or the
// namespaces are missing) is an error that says how to run it, before
// any PE starts. (.ci/run runs the transport itself, inside g1.)
func TestNetnsOutside(t *testing.T) {
	if _, _, _, err := netnsPlace(2, t.TempDir(), "goshbench"); err == nil {
		t.Skip("this process is in namespace g1 and g2 exists: the refusal cannot be seen here")
	}
	args := []string{"-transport", "netns", "-pes", "2", "-suites", "put-latency", "-quick"}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 1 {
		t.Errorf("goshbench %v: exit code %d, want 1\n%s", args, code, stderr.String())
	}
	if !strings.Contains(stderr.String(), ".ci/netns.sh run g1 goshbench") || strings.Contains(stderr.String(), "starting") {
		t.Errorf("goshbench %v: want a refusal that says how, before any job:\n%s", args, stderr.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-transport", "udp"}, {"-pes", "1"}, {"-sizes", "4M-1K"}, {"-sizes", "2G"}, {"-suites", "nope"}, {"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("goshbench %v: exit code %d, want 2\n%s", args, code, stderr.String())
		}
	}
}

func TestParseSizes(t *testing.T) {
	for in, want := range map[string][]int{
		"8":         {8},
		"8,4K,1M":   {8, 4096, 1 << 20},
		"1-8":       {1, 2, 4, 8},
		"1K-4K,8":   {8, 1024, 2048, 4096},
		"3-20":      {3, 6, 12},
		"1M, 1M,8B": {8, 1 << 20},
	} {
		got, err := parseSizes(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestList(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-list"}, &stdout, &stderr); code != 0 {
		t.Fatal(stderr.String())
	}
	for _, s := range suite.All() {
		if !strings.Contains(stdout.String(), s.Name) {
			t.Errorf("-list does not show %s", s.Name)
		}
	}
}
