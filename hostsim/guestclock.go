package hostsim

import (
	"slices"
	_ "unsafe" // go:linkname
)

// Options.TimeGuest reads a clock around every export and every host
// function the guest calls. Of the two reads around a host function, the
// part before the first one's sample and the part after the second one's
// fall outside the host's measured time and inside the export's: one read's
// cost per host call is counted as the guest's unless it is taken back
// (and around the guest's allocations inside host calls, the reverse). A
// request of plugin/router's benchmark calls 34 host functions (header and
// body reads, shared data, stats, WASI clocks) and the host asks for 10
// allocations; with time.Now (44 ns here, wall and monotonic) and nothing
// taken back, that was about 1.5 µs of each request's guest time (the same
// module's replay p50 went from 47.8 to 46.6 µs with this clock, one run
// each). The guest clock reads only the monotonic clock, and the cost of
// one read, measured when the package loads, is charged to the host.

// nanotime is the runtime's monotonic clock (the one time.Since reads),
// without time.Now's wall-clock read.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// clockReadNanos is the median gap between two consecutive nanotime reads:
// what one read adds to a measured interval.
var clockReadNanos = measureClockRead()

func measureClockRead() int64 {
	var gaps [255]int64
	for i := range gaps {
		t0 := nanotime()
		gaps[i] = nanotime() - t0
	}
	slices.Sort(gaps[:])
	return gaps[len(gaps)/2]
}
