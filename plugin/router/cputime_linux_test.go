//go:build linux

package router

import (
	"syscall"
	"time"
	"unsafe"
)

// haveThreadCPU reports that threadCPU works here.
const haveThreadCPU = true

// clockThreadCPUTime is Linux's CLOCK_THREAD_CPUTIME_ID (clock_gettime(2)).
const clockThreadCPUTime = 3

// threadCPU returns the CPU time the calling OS thread has used: unlike
// wall time it does not count the time the thread was preempted, which on a
// shared machine dominates a latency tail. Callers lock their goroutine to
// the thread (runtime.LockOSThread).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	_, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
