// Package doccheck holds the test that keeps the Go code of the guides
// compiled: every ```go block of docs/ and of the samples' READMEs is either
// a whole file, which the test builds, or a quote of compiled code, which
// the test finds, line for line, in a Go file of the module.
package doccheck
