//go:build wasip1

package proxy

import "time"

// The host's wall clock through WASI (wasi_snapshot_preview1, which the Go
// runtime imports anyway for its own clocks; Envoy and hostsim serve it).

// clockRealtime is WASI's CLOCK_REALTIME clock id.
const clockRealtime = 0

//go:wasmimport wasi_snapshot_preview1 clock_time_get
//go:noescape
func wasiClockTimeGet(clockID uint32, precision uint64, time *uint64) uint32

// NowNanos returns the wall clock in Unix nanoseconds: time.Now().UnixNano()
// in one host call, where time.Now reads the wall and the monotonic clock,
// two calls and the time package's bookkeeping (the router reads the clock
// 4.7 times a request).
func NowNanos() int64 {
	var t uint64
	if wasiClockTimeGet(clockRealtime, 1, &t) != 0 {
		return time.Now().UnixNano()
	}
	return int64(t)
}
