package hostsim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// TestGuestProbeCounts: a probe counts exactly the guest calls it matches,
// times them, and Reset zeroes it. The module is compiled without a probe
// first, so a probed Host that reused the shared compilation cache would
// get the uninstrumented code and count nothing.
func TestGuestProbeCounts(t *testing.T) {
	plain := NewHost(Options{})
	defer plain.Close()
	if _, err := plain.Compile(context.Background(), guestWasm); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		match []string
		// want are the exact function names that must be probed, with
		// the calls one Configure running three commands makes (main.run
		// runs the script of proxy_on_context_create and of
		// proxy_on_configure).
		want map[string]uint64
	}{
		{name: "exact name", match: []string{"main.exec"}, want: map[string]uint64{"main.exec": 3}},
		{name: "substring of several", match: []string{"main.ex", "main.ru"},
			want: map[string]uint64{"main.exec": 3, "main.run": 2}},
		{name: "empty substring matches nothing", match: []string{""}, want: map[string]uint64{}},
		{name: "no such function", match: []string{"main.noSuchFunction"}, want: map[string]uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewGuestProbe(tc.match)
			_, vm := newGuestVM(t, Options{Probe: p, LogLevel: LogWarn}, "probe", "")
			p.Reset()
			if _, err := vm.Configure("root", []byte("configure: now; now; now")); err != nil {
				t.Fatal(err)
			}
			stats := p.Stats()
			got := map[string]uint64{}
			for _, s := range stats {
				got[s.Name] = s.Calls
				if s.OuterCalls != s.Calls || s.Time <= 0 {
					t.Errorf("Stats()[%q] = %+v, want OuterCalls = Calls and Time > 0", s.Name, s)
				}
				if s.Max > s.Time || s.Max*time.Duration(s.OuterCalls) < s.Time {
					t.Errorf("Stats()[%q] = %+v, want Time/OuterCalls <= Max <= Time", s.Name, s)
				}
			}
			for name, calls := range tc.want {
				if got[name] != calls {
					t.Errorf("NewGuestProbe(%q): calls of %s = %d, want %d", tc.match, name, got[name], calls)
				}
				if f := p.Func(name); f.Calls != calls {
					t.Errorf("Func(%q).Calls = %d, want %d", name, f.Calls, calls)
				}
			}
			for name := range got {
				if !matchesAny(name, tc.match) {
					t.Errorf("NewGuestProbe(%q) probed %s, which matches none", tc.match, name)
				}
			}
			if len(tc.want) == 0 && len(stats) != 0 {
				t.Errorf("NewGuestProbe(%q).Stats() = %+v, want none", tc.match, stats)
			}
			p.Reset()
			if s := p.Stats(); len(s) != 0 {
				t.Errorf("Stats() after Reset = %+v, want none", s)
			}
		})
	}
}

func matchesAny(name string, match []string) bool {
	for _, m := range match {
		if m != "" && strings.Contains(name, m) {
			return true
		}
	}
	return false
}

// TestGuestProbeCallers: RecordCallers keys each call by its stack,
// innermost first.
func TestGuestProbeCallers(t *testing.T) {
	p := NewGuestProbe([]string{"main.exec"})
	_, vm := newGuestVM(t, Options{Probe: p, LogLevel: LogWarn}, "callers", "")
	p.RecordCallers("main.exec", 2)
	if _, err := vm.Configure("root", []byte("configure: now; now")); err != nil {
		t.Fatal(err)
	}
	got := p.Callers()
	if got["main.exec < main.run"] != 2 || len(got) != 1 {
		t.Errorf("Callers() = %v, want map[main.exec < main.run:2]", got)
	}
	p.RecordCallers("", 0)
	if _, err := vm.Configure("root2", []byte("configure: now")); err != nil {
		t.Fatal(err)
	}
	if after := p.Callers(); after["main.exec < main.run"] != 2 {
		t.Errorf("Callers() after RecordCallers(\"\", 0) = %v, want unchanged %v", after, got)
	}
}

// fakeModule stands for a module instance in listener calls; only
// IsClosed is ever asked of it.
type fakeModule struct{ api.Module }

func (*fakeModule) IsClosed() bool { return false }

// TestGuestProbeNesting: nested calls of a function on one VM count as
// calls but time once, while calls on two VMs at once nest independently.
func TestGuestProbeNesting(t *testing.T) {
	a, b := &fakeModule{}, &fakeModule{}
	tests := []struct {
		name      string
		events    string // "+a" enters on VM a, "-a" returns, "!a" aborts
		wantCalls uint64
		wantOuter uint64
	}{
		{name: "flat", events: "+a -a +a -a", wantCalls: 2, wantOuter: 2},
		{name: "recursive", events: "+a +a +a -a -a -a", wantCalls: 3, wantOuter: 1},
		{name: "two vms interleaved", events: "+a +b -a -b", wantCalls: 2, wantOuter: 2},
		{name: "abort ends a call", events: "+a +a !a !a +b -b", wantCalls: 3, wantOuter: 2},
		{name: "unfinished call untimed", events: "+a +b -b", wantCalls: 2, wantOuter: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewGuestProbe([]string{"f"})
			l := p.NewFunctionListener(fakeDef{name: "pkg.f"}).(probeListener)
			if p.NewFunctionListener(fakeDef{name: "pkg.g"}) != nil {
				t.Fatal(`NewFunctionListener("pkg.g") != nil, want no listener for an unmatched name`)
			}
			for _, ev := range strings.Fields(tc.events) {
				mod := api.Module(a)
				if ev[1] == 'b' {
					mod = b
				}
				switch ev[0] {
				case '+':
					l.Before(context.Background(), mod, nil, nil, nil)
				case '-':
					l.After(context.Background(), mod, nil, nil)
				case '!':
					l.Abort(context.Background(), mod, nil, nil)
				}
			}
			got := p.Func("pkg.f")
			if got.Calls != tc.wantCalls || got.OuterCalls != tc.wantOuter {
				t.Errorf("events %q: Func = %+v, want Calls %d, OuterCalls %d", tc.events, got, tc.wantCalls, tc.wantOuter)
			}
		})
	}
}

// fakeDef is a function definition of which only Name is ever asked.
type fakeDef struct {
	api.FunctionDefinition
	name string
}

func (d fakeDef) Name() string { return d.name }
