package hostsim

import "testing"

// TestResponseBodyForwardedFrom: the part of the forwarded response body
// from an offset on is ResponseBodyForwarded's tail, chunk by chunk as a
// streaming proxy asks for it, and nil past the end.
func TestResponseBodyForwardedFrom(t *testing.T) {
	_, vm := newGuestVM(t, Options{}, "vm", "")
	s := stream(t, configure(t, vm, "r", ""), nil)
	if _, err := s.ResponseHeaders([][2]string{{":status", "200"}}, false); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, chunk := range []string{"data: a\n\n", "data: bc\n\n", "", "data: [DONE]\n\n"} {
		if _, err := s.ResponseBody([]byte(chunk), chunk == "data: [DONE]\n\n"); err != nil {
			t.Fatal(err)
		}
		got = append(got, s.ResponseBodyForwardedFrom(len(got))...)
	}
	all := s.ResponseBodyForwarded()
	if string(got) != string(all) || string(all) != "data: a\n\ndata: bc\n\ndata: [DONE]\n\n" {
		t.Errorf("chunks from ResponseBodyForwardedFrom = %q, ResponseBodyForwarded() = %q; want both the whole stream", got, all)
	}
	for _, tc := range []struct {
		name string
		off  int
		want string
	}{
		{name: "start", off: 0, want: string(all)},
		{name: "middle", off: 9, want: string(all[9:])},
		{name: "end", off: len(all), want: ""},
		{name: "past the end", off: len(all) + 5, want: ""},
		{name: "negative", off: -1, want: ""},
	} {
		if got := s.ResponseBodyForwardedFrom(tc.off); string(got) != tc.want || (tc.want == "" && got != nil) {
			t.Errorf("%s: ResponseBodyForwardedFrom(%d) = %q, want %q", tc.name, tc.off, got, tc.want)
		}
	}
}
