// Package layout holds tests of the repository's layout rules — which
// package may name which table in SQL, and which framework packages a
// package may import — and no code.
package layout
