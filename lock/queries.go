package lock

// The statements of the Postgres provider. They name no table: a lock is a
// session advisory lock on a 64-bit key hashed from the namespace and the
// lock's name.
const (
	// sqlTryLock takes the lock if it is free. $1 is the namespaced name.
	sqlTryLock = `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`

	// sqlLockTimeout bounds how long sqlLock waits. $1 is milliseconds.
	sqlLockTimeout = `SELECT set_config('lock_timeout', $1, false)`

	// sqlLock waits for the lock up to lock_timeout, which fails the
	// statement with 55P03 (lock_not_available).
	sqlLock = `SELECT pg_advisory_lock(hashtextextended($1, 0))`

	// sqlUnlock gives the lock back; it answers false when this session
	// did not hold it.
	sqlUnlock = `SELECT pg_advisory_unlock(hashtextextended($1, 0))`
)
