// Package layout holds tests of the repository's layout rules — who may
// name which table in SQL — and no code.
package layout
