package pipeline

// SetAsOfChunk sets how many events d's as-of lists read and fold between
// yields, so a test can split a small history into many chunks.
func SetAsOfChunk(d *Executor, n int) { d.proj.SetAsOfChunk(n) }
