//go:build !linux

package router

import "time"

// haveThreadCPU reports that threadCPU works here: not on this system.
const haveThreadCPU = false

// threadCPU is not available here (see cputime_linux_test.go).
func threadCPU() time.Duration { return 0 }
