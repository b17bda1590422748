//go:build !linux

package proctest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; children there
// rely on test cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
