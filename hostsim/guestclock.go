package hostsim

import (
	"slices"
	_ "unsafe" // go:linkname
)

// Options.TimeGuest reads a clock around every export and every host
// function the guest calls. Of the two reads around a host function, the
// part before the first one's sample and the part after the second one's
// fall outside the host's measured time and inside the export's: each host
// call would add one read's cost to the guest's time (and each allocation
// the host asks for inside one would take one off) unless it is taken
// back. So the guest clock reads only the monotonic clock, and the cost of
// one read, measured when the package loads, is charged to the host
// (TestGuestTime; docs/performance.md "Method" has what it amounts to).

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
