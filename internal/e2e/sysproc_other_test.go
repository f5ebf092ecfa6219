//go:build !linux

package e2e_test

import "syscall"

// sysProcAttr is nil where the kernel cannot tie a child's life to its
// parent's; the tests' cleanups still kill every process they started.
func sysProcAttr() *syscall.SysProcAttr { return nil }
