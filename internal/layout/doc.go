// Package layout holds tests of the repository's layout rules — which
// package may name which table in SQL, which framework packages a package
// may import, and that only eventstore wraps pgx's transaction — and no
// code.
package layout
