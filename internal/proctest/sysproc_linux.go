package proctest

import "syscall"

// sysProcAttr makes the kernel kill a child if the test binary dies
// without running its cleanups (a panic or a go test -timeout), so no
// orphaned server or worker outlives the run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
