package hostsim

import (
	"strconv"
	"testing"
	"time"
)

// TestStepWallClock: a wall-clock step, forward or back, moves what the
// guest reads through both clock_time_get(REALTIME) and
// proxy_get_current_time_nanoseconds, and nothing else: virtual time and
// the tick schedule keep going as before.
func TestStepWallClock(t *testing.T) {
	tests := []struct {
		name  string
		steps []time.Duration
		want  time.Duration // total wall offset
	}{
		{name: "backward", steps: []time.Duration{-10 * time.Minute}, want: -10 * time.Minute},
		{name: "forward", steps: []time.Duration{time.Hour}, want: time.Hour},
		{name: "back and forth", steps: []time.Duration{-time.Minute, 3 * time.Second, time.Minute}, want: 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
			h, vm := newGuestVM(t, Options{Start: start}, "vm", "")
			configure(t, vm, "r", "configure: tick 100\ntick: now")
			if err := h.Advance(250 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			for _, d := range tc.steps {
				h.StepWallClock(d)
			}
			if got := h.Now(); got != 250*time.Millisecond {
				t.Errorf("Now() after StepWallClock(%v) = %v, want 250ms (virtual time unaffected)", tc.steps, got)
			}
			if got, want := h.WallTime(), start.Add(250*time.Millisecond+tc.want); !got.Equal(want) {
				t.Errorf("WallTime() after StepWallClock(%v) = %v, want %v", tc.steps, got, want)
			}
			configure(t, vm, "w", "configure: walltime")
			want := strconv.FormatInt(start.Add(250*time.Millisecond+tc.want).UnixNano(), 10)
			if got := result(t, h, "configure", "walltime"); got != want {
				t.Errorf("guest time.Now().UnixNano() after StepWallClock(%v) = %s, want %s", tc.steps, got, want)
			}
			// The next tick still fires at 300 ms of virtual time (50 ms
			// later), and reads the stepped wall clock.
			before := len(results(h, "tick", "now"))
			if err := h.Advance(49 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if n := len(results(h, "tick", "now")); n != before {
				t.Fatalf("ticks 49 ms after the step = %d, want none (schedule unaffected)", n-before)
			}
			if err := h.Advance(time.Millisecond); err != nil {
				t.Fatal(err)
			}
			nows := results(h, "tick", "now")
			if len(nows) != before+1 {
				t.Fatalf("ticks at 300 ms = %d, want 1", len(nows)-before)
			}
			wantNow := "0 " + strconv.FormatInt(start.Add(300*time.Millisecond+tc.want).UnixNano(), 10)
			if got := nows[len(nows)-1]; got != wantNow {
				t.Errorf("proxy_get_current_time_nanoseconds at the 300 ms tick = %q, want %q", got, wantNow)
			}
		})
	}
}
