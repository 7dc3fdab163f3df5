package suite

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procState is what Linux says about this process's scheduling.
type procState struct {
	cpu                     int    // CPU it last ran on (/proc/self/stat field 39); -1 if unknown
	cpus                    string // Cpus_allowed_list
	voluntary, nonvoluntary int64  // context switches so far, of every thread of the process
}

// readProc reads the switch counts from getrusage, which sums every
// thread of the process, the exited ones included. /proc/self/status's
// counts are the main thread's alone, and a Go PE's goroutines run on
// other threads, so they missed most of its switches.
func readProc() procState {
	st := procState{cpu: currentCPU()}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		st.voluntary, st.nonvoluntary = int64(ru.Nvcsw), int64(ru.Nivcsw) // int32 on a 32-bit machine
	}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return st
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Cpus_allowed_list":
			st.cpus = v
		}
	}
	return st
}

// currentCPU is the CPU the calling thread last ran on, or -1.
func currentCPU() int {
	cpu := -1
	if b, err := os.ReadFile("/proc/thread-self/stat"); err == nil {
		// Fields after the command name, which is in parentheses and may
		// contain spaces: field 3 is the first after ") ".
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 36 {
				cpu, _ = strconv.Atoi(f[36]) // field 39
			}
		}
	}
	return cpu
}
