//go:build !wasip1

package proxy

import "time"

// NowNanos returns the wall clock in Unix nanoseconds (clock_wasm.go reads
// it from the host in one call).
func NowNanos() int64 { return time.Now().UnixNano() }
