//go:build !linux

package kubetest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; servers there rely
// on test cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
