package scoring

import "testing"

// TestDecidingTerm: the reason names the term of ETTFT that favoured the
// chosen candidate most over the runner-up.
func TestDecidingTerm(t *testing.T) {
	h, _ := LookupHardware("h100")
	const n = 8000
	cold := prefillSec(&h, n)
	warm := prefillSec(&h, n-6000)
	tests := []struct {
		name   string
		chosen Candidate
		other  Candidate
		want   Reason
	}{
		{name: "shorter queue", chosen: Candidate{WaitSec: 0.1, PrefillSec: cold}, other: Candidate{WaitSec: 0.6, PrefillSec: cold}, want: ReasonLeastLoaded},
		{name: "cached prefix on an idler replica",
			chosen: Candidate{WaitSec: 0, PrefillSec: warm, CachedTokens: 6000}, other: Candidate{WaitSec: 0.1, PrefillSec: cold}, want: ReasonPrefixAffinity},
		{name: "cached prefix, both idle",
			chosen: Candidate{PrefillSec: warm, CachedTokens: 6000}, other: Candidate{PrefillSec: cold}, want: ReasonPrefixAffinity},
		{name: "shorter queue outweighs a small cached prefix",
			chosen: Candidate{WaitSec: 0, PrefillSec: prefillSec(&h, n-64), CachedTokens: 64}, other: Candidate{WaitSec: 0.5, PrefillSec: cold}, want: ReasonLeastLoaded},
		{name: "adapter resident", chosen: Candidate{WaitSec: 0.2, PrefillSec: cold}, other: Candidate{AdapterSec: 0.8, PrefillSec: cold}, want: ReasonAdapterResident},
		{name: "faster hardware", chosen: Candidate{WaitSec: 0.1, PrefillSec: cold}, other: Candidate{PrefillSec: 3 * cold}, want: ReasonFasterHardware},
		{name: "externality alone", chosen: Candidate{WaitSec: 0.2, PrefillSec: cold}, other: Candidate{WaitSec: 0.1, PrefillSec: cold, ExternalSec: 0.5}, want: ReasonLeastLoaded},
		{name: "cached prefix behind a longer queue, the externality its prefill's",
			chosen: Candidate{WaitSec: 0.6, PrefillSec: warm, CachedTokens: 6000, ExternalSec: 0.1}, other: Candidate{WaitSec: 0.5, PrefillSec: cold, ExternalSec: 0.7}, want: ReasonPrefixAffinity},
		{name: "adapter load, the externality its stall's",
			chosen: Candidate{WaitSec: 0.9, PrefillSec: cold, ExternalSec: 0.1}, other: Candidate{WaitSec: 0.7, AdapterSec: 1.5, PrefillSec: cold, ExternalSec: 21}, want: ReasonAdapterResident},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decidingTerm(&tc.chosen, &tc.other, &h, n); got != tc.want {
				t.Errorf("decidingTerm(%+v, %+v) = %v, want %v", tc.chosen, tc.other, got, tc.want)
			}
		})
	}
}

// TestPickReasonCachedPrefix: two idle replicas, the prompt's prefix cached
// on one: Pick chooses it for the prefix, and says so (it was labelled
// least-loaded, its queue being as short as the other's).
func TestPickReasonCachedPrefix(t *testing.T) {
	now := 10 * sec
	p := DefaultParams()
	rs := fleet("h100", 2, now)
	var d Decision
	Pick(&p, &Request{PromptTokens: 8000}, rs, []int{0, 6000}, nil, now, &d)
	if d.Index != 1 || d.Reason != ReasonPrefixAffinity {
		t.Fatalf("Pick(cached on 1, both idle) = %d (%v), want 1 (prefix-affinity)", d.Index, d.Reason)
	}
}
