//go:build !linux

package redistest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; servers there rely
// on Close and test cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
