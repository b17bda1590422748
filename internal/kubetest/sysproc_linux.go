package kubetest

import "syscall"

// sysProcAttr makes the kernel kill etcd and kube-apiserver if the test
// binary dies without running its cleanups (a panic or a go test
// -timeout), so no orphaned servers outlive the run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
