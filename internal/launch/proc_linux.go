package launch

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
)

// startAll starts cmds in order and returns how many started. Each PE
// gets its own process group (so a signal to the group reaches whatever
// the PE started too) and a parent-death signal of SIGKILL (so PEs die
// with goshrun even if goshrun is itself killed with SIGKILL).
//
// The parent-death signal fires when the thread that forked the child
// exits, not the process. All PEs are forked from one locked thread,
// which the runtime keeps after UnlockOSThread: Go ends a thread only
// when a goroutine exits while still locked to it.
func startAll(cmds []*exec.Cmd) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i, cmd := range cmds {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return i, err
		}
	}
	return len(cmds), nil
}

// signalGroup sends sig to the process group led by pid (a PE and its
// descendants). A group that no longer exists is not an error.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// sysSignal converts an os.Signal to a syscall.Signal (SIGTERM for one
// that is not a syscall.Signal).
func sysSignal(s os.Signal) syscall.Signal {
	if ss, ok := s.(syscall.Signal); ok {
		return ss
	}
	return syscall.SIGTERM
}

// describe says how a PE ended, and the job exit code that stands for
// it: the exit status, or 128 + the signal number.
func describe(st *os.ProcessState) (how string, code int) {
	if st == nil {
		return "ended in an unknown way", 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + ws.Signal().String(), 128 + int(ws.Signal())
	}
	return "exited with status " + strconv.Itoa(st.ExitCode()), st.ExitCode()
}
