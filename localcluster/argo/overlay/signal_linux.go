//go:build linux

// Project Signal's own Linux implementation of the process helpers that the emissary executor
// needs. The argo-workflows v4.0.5 module zip served by the Go module proxy has them only for
// darwin and windows, so argoexec does not compile for Linux from it; build.sh adds this file
// to the package with `go build -overlay` (local test infrastructure only).

package osspecific

import (
	"os"
	"syscall"

	"github.com/argoproj/argo-workflows/v4/util/errors"
)

// Term is the signal that asks a container's process to stop.
var Term = syscall.SIGTERM

// CanIgnoreSignal tells which received signals are not forwarded to the child process.
func CanIgnoreSignal(s os.Signal) bool {
	switch s {
	case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGWINCH:
		return true
	}
	return false
}

// Kill signals the process group the child leads (it is started with Setpgid), or the child.
func Kill(pid int, s syscall.Signal) error {
	if group, err := syscall.Getpgid(pid); err == nil && group == pid {
		return syscall.Kill(-pid, s)
	}
	return syscall.Kill(pid, s)
}

// Setpgid makes the child the leader of a new process group.
func Setpgid(a *syscall.SysProcAttr) {
	a.Setpgid = true
}

// Wait waits for the child and reports a non-zero exit (or death by a signal, as 128+signal)
// as an errors.Exited error.
func Wait(process *os.Process) error {
	state, err := process.Wait()
	if err != nil {
		return err
	}
	status, ok := state.Sys().(syscall.WaitStatus)
	switch {
	case ok && status.Signaled():
		return errors.NewExitErr(128 + int(status.Signal()))
	case state.ExitCode() != 0:
		return errors.NewExitErr(state.ExitCode())
	}
	return nil
}
