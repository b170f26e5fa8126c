package router

import (
	"testing"

	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/scoring"
)

// TestCalibrationAdopt: a replica that keeps its name keeps what its
// calibration learned, at any address, unless its hardware profile
// changed; a new replica starts from its profile.
func TestCalibrationAdopt(t *testing.T) {
	parse := func(replicas string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(`{"replicas":[` + replicas + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	var from calibration
	from.setup(parse(`{"name":"a","address":"10.0.0.1:1"},{"name":"b","address":"10.0.0.2:1"},{"name":"c","address":"10.0.0.3:1"}`))
	for i := range 3 {
		for range 2 * scoring.CalibrationMinSamples {
			from.observe(i, 2000, 3, 0) // three times the profile's prefill
		}
		if from.hardware[i] == from.priors[i] {
			t.Fatalf("replica %d not calibrated by slow first tokens", i)
		}
	}
	// c moves to a new address, b gets another profile, d is new.
	var c calibration
	c.setup(parse(`{"name":"d","address":"10.0.0.4:1"},{"name":"c","address":"10.0.0.9:1"},{"name":"b","address":"10.0.0.2:1","hardware":"a100"},{"name":"a","address":"10.0.0.1:1"}`))
	c.adopt(&from, []int{3, 2, 1})
	tests := []struct {
		name string
		i    int
		want scoring.Hardware
	}{
		{name: "kept", i: 3, want: from.hardware[0]},
		{name: "re-addressed", i: 1, want: from.hardware[2]},
		{name: "other profile", i: 2, want: c.priors[2]},
		{name: "new", i: 0, want: c.priors[0]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.hardware[tc.i]; got != tc.want {
				t.Errorf("hardware[%d] after adopt = %+v, want %+v", tc.i, got, tc.want)
			}
		})
	}
	if len(c.changed) != 2 {
		t.Errorf("changed after adopt = %v, want the two calibrated replicas listed for the view", c.changed)
	}
}
