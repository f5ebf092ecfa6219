package e2e_test

import "syscall"

// sysProcAttr makes the kernel kill an app process when the test process
// dies without its cleanups (a panic, a -timeout), so no app outlives it.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
