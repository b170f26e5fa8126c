package shared

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuroute/gpuroute/scoring"
)

func testAddrs(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = "10.0.0." + strconv.Itoa(i) + ":8000"
	}
	return a
}

func testWork(n int) []scoring.Work { return testRecord(1, 0, 0, n).Work }

type pEntry struct {
	replica int
	chain   []uint64
}

func peerEntries(p *PeerExport) []pEntry {
	var got []pEntry
	p.Each(func(r int, c []uint64) { got = append(got, pEntry{r, slices.Clone(c)}) })
	return got
}

// exportedSeqs decodes b and returns the seqs of its entries (testChain
// puts seq*100 in block 0) and its Next.
func exportedSeqs(t *testing.T, b []byte) ([]uint64, uint64) {
	t.Helper()
	var p PeerExport
	if err := p.Decode(b); err != nil {
		t.Fatalf("Decode(AppendPeerExport) = %v", err)
	}
	var seqs []uint64
	p.Each(func(_ int, c []uint64) { seqs = append(seqs, c[0]/100) })
	return seqs, p.Next
}

func seqRange(lo, hi uint64) []uint64 {
	var s []uint64
	for k := lo; k <= hi; k++ {
		s = append(s, k)
	}
	return s
}

func TestPeerExportCodec(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
		appends  int
	}{
		{name: "empty", replicas: 0, appends: 0},
		{name: "replicas only", replicas: 3, appends: 0},
		{name: "entries", replicas: 5, appends: 7},
		{name: "max replicas", replicas: MaxReplicas, appends: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := testJournal(256, 8, tc.appends)
			addrs, work := testAddrs(tc.replicas), testWork(tc.replicas)
			b, err := AppendPeerExport([]byte("prefix"), j, j.Epoch, 0, 1000, addrs, work, 1.25, -5)
			if err != nil || !bytes.HasPrefix(b, []byte("prefix")) {
				t.Fatalf("AppendPeerExport(%s) = %v; want nil and b extended", tc.name, err)
			}
			b = b[len("prefix"):]
			var p PeerExport
			if err := p.Decode(b); err != nil {
				t.Fatalf("Decode(AppendPeerExport(%s)) = %v", tc.name, err)
			}
			if p.Epoch != 42 || p.Next != j.Next() || p.WrittenNanos != -5 || p.ArrivalPerSec != 1.25 || p.NumReplicas() != tc.replicas {
				t.Fatalf("Decode: Epoch, Next, WrittenNanos, ArrivalPerSec, NumReplicas = %d, %d, %d, %v, %d; want 42, %d, -5, 1.25, %d",
					p.Epoch, p.Next, p.WrittenNanos, p.ArrivalPerSec, p.NumReplicas(), j.Next(), tc.replicas)
			}
			for i := range addrs {
				if string(p.Addr(i)) != addrs[i] || p.Work[i] != work[i] {
					t.Fatalf("replica %d = %q %+v, want %q %+v", i, p.Addr(i), p.Work[i], addrs[i], work[i])
				}
			}
			if p.Addr(-1) != nil || p.Addr(tc.replicas) != nil {
				t.Fatalf("Addr out of range = %q, %q; want nil", p.Addr(-1), p.Addr(tc.replicas))
			}
			var want []pEntry
			if tc.replicas > 0 {
				j.Each(0, func(_ uint64, r int, c []uint64) { want = append(want, pEntry{r, slices.Clone(c)}) })
			}
			got := peerEntries(&p)
			if p.Len() != len(want) || len(got) != len(want) {
				t.Fatalf("Len, entries = %d, %v; want %v", p.Len(), got, want)
			}
			for i := range want {
				if got[i].replica != want[i].replica || !slices.Equal(got[i].chain, want[i].chain) {
					t.Fatalf("entry %d = %v, want %v", i, got[i], want[i])
				}
			}
			if again, err := p.AppendBinary(nil); err != nil || !bytes.Equal(again, b) {
				t.Fatalf("AppendBinary(Decode(b)) = %x, %v; want %x", again, err, b)
			}
		})
	}
}

func TestPeerExportCursor(t *testing.T) {
	j := testJournal(8, 4, 10) // seqs 3..10, replicas k%5
	addrs, work := testAddrs(5), testWork(5)
	for _, tc := range []struct {
		name         string
		epoch, since uint64
		max          int
		want         []uint64
		next         uint64
	}{
		{name: "matching epoch", epoch: 42, since: 5, max: 100, want: seqRange(5, 10), next: 11},
		{name: "caught up", epoch: 42, since: 11, max: 100, want: nil, next: 11},
		{name: "first request", epoch: 42, since: 0, max: 100, want: seqRange(3, 10), next: 11},
		{name: "since dropped", epoch: 42, since: 1, max: 100, want: seqRange(3, 10), next: 11},
		{name: "wrong epoch", epoch: 41, since: 8, max: 100, want: seqRange(3, 10), next: 11},
		{name: "since beyond next", epoch: 42, since: 12, max: 100, want: seqRange(3, 10), next: 11},
		{name: "since max", epoch: 42, since: math.MaxUint64, max: 100, want: seqRange(3, 10), next: 11},
		{name: "truncated", epoch: 42, since: 5, max: 2, want: seqRange(5, 6), next: 7},
		{name: "truncated restart", epoch: 0, since: 5, max: 3, want: seqRange(3, 5), next: 6},
		{name: "max zero", epoch: 42, since: 5, max: 0, want: nil, next: 5},
		{name: "max negative", epoch: 42, since: 5, max: -1, want: nil, next: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := AppendPeerExport(nil, j, tc.epoch, tc.since, tc.max, addrs, work, 1.25, 0)
			if err != nil {
				t.Fatal(err)
			}
			seqs, next := exportedSeqs(t, b)
			if !slices.Equal(seqs, tc.want) || next != tc.next {
				t.Fatalf("AppendPeerExport(epoch %d, since %d, max %d) = seqs %v next %d; want %v next %d",
					tc.epoch, tc.since, tc.max, seqs, next, tc.want, tc.next)
			}
		})
	}

	// A nil journal exports the replicas and no entries.
	if b, err := AppendPeerExport(nil, nil, 0, 7, 10, addrs, work, 1.25, 0); err != nil {
		t.Fatalf("AppendPeerExport(nil journal) = %v", err)
	} else if seqs, next := exportedSeqs(t, b); seqs != nil || next != 1 {
		t.Fatalf("AppendPeerExport(nil journal) = seqs %v next %d; want none, 1", seqs, next)
	}

	// Entries naming a replica beyond the addresses are walked past, not sent.
	b, _ := AppendPeerExport(nil, j, 42, 0, 3, addrs[:2], work[:2], 1.25, 0)
	if seqs, next := exportedSeqs(t, b); !slices.Equal(seqs, []uint64{5, 6, 10}) || next != 11 {
		t.Fatalf("AppendPeerExport(2 replicas, max 3) = seqs %v next %d; want [5 6 10] next 11", seqs, next)
	}
}

// TestPeerExportContinuation polls with a small page while the journal keeps
// growing (and wrapping): every entry still kept when its turn comes arrives
// exactly once, in order.
func TestPeerExportContinuation(t *testing.T) {
	j := NewJournal(16, 2)
	j.Reset(7, 1)
	addrs, work := testAddrs(5), testWork(5)
	var cursor, epoch, seq uint64
	var got []uint64
	buf := make([]byte, 0, 4096)
	for round := range 40 {
		for range round % 4 { // 0..3 new entries per round, 1.5 on average
			seq++
			j.Append(int(seq%5), testChain(seq, 2))
		}
		var err error
		buf, err = AppendPeerExport(buf[:0], j, epoch, cursor, 2, addrs, work, 1.25, 0)
		if err != nil {
			t.Fatal(err)
		}
		var p PeerExport
		if err := p.Decode(buf); err != nil {
			t.Fatal(err)
		}
		p.Each(func(_ int, c []uint64) { got = append(got, c[0]/100) })
		epoch, cursor = p.Epoch, p.Next
	}
	// Drain the rest.
	for cursor < j.Next() {
		buf, _ = AppendPeerExport(buf[:0], j, epoch, cursor, 2, addrs, work, 1.25, 0)
		s, next := exportedSeqs(t, buf)
		got, cursor = append(got, s...), next
	}
	if !slices.Equal(got, seqRange(1, seq)) {
		t.Fatalf("paged export = %v, want each of 1..%d once", got, seq)
	}

	// A recreated journal (new epoch) makes the asker start over.
	j.Reset(8, 1)
	j.Append(1, testChain(1, 1))
	buf, _ = AppendPeerExport(buf[:0], j, epoch, cursor, 2, addrs, work, 1.25, 0)
	if s, next := exportedSeqs(t, buf); !slices.Equal(s, []uint64{1}) || next != 2 {
		t.Fatalf("after Reset(new epoch): seqs %v next %d; want [1] next 2", s, next)
	}
}

func TestAppendPeerExportErrors(t *testing.T) {
	j := testJournal(4, 4, 3)
	neg := testWork(2)
	neg[1].UnseenTokens = -1
	for _, tc := range []struct {
		name  string
		addrs []string
		work  []scoring.Work
		rate  float64
	}{
		{name: "count mismatch", addrs: testAddrs(2), work: testWork(3)},
		{name: "too many replicas", addrs: testAddrs(MaxReplicas + 1), work: testWork(MaxReplicas + 1)},
		{name: "address too long", addrs: []string{"a", strings.Repeat("x", MaxPeerAddrLen+1)}, work: testWork(2)},
		{name: "negative work", addrs: testAddrs(2), work: neg},
		{name: "NaN rate", addrs: testAddrs(2), work: testWork(2), rate: math.NaN()},
		{name: "infinite rate", addrs: testAddrs(2), work: testWork(2), rate: math.Inf(1)},
		{name: "negative rate", addrs: testAddrs(2), work: testWork(2), rate: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := AppendPeerExport([]byte("x"), j, 42, 0, 10, tc.addrs, tc.work, tc.rate, 0)
			if !errors.Is(err, ErrInvalid) || string(b) != "x" {
				t.Fatalf("AppendPeerExport(%s) = %q, %v; want %q, ErrInvalid", tc.name, b, err, "x")
			}
		})
	}
	// The longest address is fine.
	long := []string{strings.Repeat("x", MaxPeerAddrLen)}
	if _, err := AppendPeerExport(nil, j, 42, 0, 10, long, testWork(1), 1.25, 0); err != nil {
		t.Fatalf("AppendPeerExport(255-byte address) = %v, want nil", err)
	}
	var p PeerExport
	p.Work = testWork(1) // no addresses: Work no longer matches
	if _, err := p.AppendBinary(nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("PeerExport.AppendBinary(1 work, 0 addresses) = %v, want ErrInvalid", err)
	}
}

func TestPeerExportDecodeErrors(t *testing.T) {
	j := NewJournal(4, 4)
	j.Reset(42, 1)
	j.Append(1, []uint64{11, 12})
	j.Append(0, []uint64{21})
	good, err := AppendPeerExport(nil, j, 0, 0, 10, []string{"ab", "c"}, testWork(2), 1.25, 9)
	if err != nil {
		t.Fatal(err)
	}
	set := func(off int, v ...byte) []byte { b := bytes.Clone(good); copy(b[off:], v); return b }
	const nrepAt = peerHeaderLen - 2
	work0 := peerHeaderLen + 1 + 2 // replica 0's Work
	countAt := peerHeaderLen + 2*peerReplicaMin + 3
	entry0 := countAt + 4
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{name: "empty", in: nil, want: ErrShort},
		{name: "header cut", in: good[:peerHeaderLen-1], want: ErrShort},
		{name: "replica cut", in: good[:work0+10], want: ErrShort},
		{name: "count cut", in: good[:countAt+2], want: ErrShort},
		{name: "blocks cut", in: good[:len(good)-1], want: ErrShort},
		{name: "replica count beyond bytes", in: set(nrepAt, 0xff, 0xff), want: ErrShort},
		{name: "address length beyond bytes", in: set(peerHeaderLen, 0xff), want: ErrShort},
		{name: "entry count beyond bytes", in: set(countAt, 0xff, 0xff, 0xff, 0xff), want: ErrShort},
		{name: "nblocks beyond bytes", in: set(entry0+2, 0xff, 0xff), want: ErrShort},
		{name: "trailing", in: append(bytes.Clone(good), 0), want: ErrInvalid},
		{name: "replica out of range", in: set(entry0, 2), want: ErrInvalid},
		{name: "empty chain", in: set(entry0+2, 0, 0), want: ErrInvalid},
		{name: "negative work", in: set(work0+8+7, 0x80), want: ErrInvalid},
		{name: "NaN rate", in: set(headerLen+3*8, 0x01, 0, 0, 0, 0, 0, 0xf8, 0x7f), want: ErrInvalid},
		{name: "negative rate", in: set(headerLen+3*8+7, 0xbf), want: ErrInvalid},
		{name: "version", in: set(4, Version+1), want: ErrVersion},
		{name: "magic", in: set(0, 'g'), want: ErrMagic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p PeerExport
			if err := p.Decode(good); err != nil {
				t.Fatal(err)
			}
			if err := p.Decode(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("Decode(%s) = %v, want %v", tc.name, err, tc.want)
			}
			if after, err := p.AppendBinary(nil); err != nil || !bytes.Equal(after, good) {
				t.Fatalf("Decode(%s) changed the export to %x (%v)", tc.name, after, err)
			}
		})
	}
	// More than MaxReplicas replicas, with the bytes for them, is invalid.
	big := appendHeader(nil, magicPeer)
	big = append(big, make([]byte, 24)...)
	big = appendU16(big, MaxReplicas+1)
	big = append(big, make([]byte, (MaxReplicas+1)*peerReplicaMin+4)...)
	var p PeerExport
	if err := p.Decode(big); !errors.Is(err, ErrInvalid) || p.NumReplicas() != 0 {
		t.Fatalf("Decode(%d replicas) = %v, want ErrInvalid", MaxReplicas+1, err)
	}
}

// benchPeer is a gateway of 64 replicas answering with 256 entries of 32
// blocks.
func benchPeer() (*Journal, []string, []scoring.Work) {
	return benchJournal(), testAddrs(64), testWork(64)
}

func TestPeerExportAllocs(t *testing.T) {
	j, addrs, work := benchPeer()
	buf := make([]byte, 0, 1<<17)
	var err error
	if n := testing.AllocsPerRun(100, func() {
		buf, err = AppendPeerExport(buf[:0], j, j.Epoch, j.First()+3, 200, addrs, work, 1.25, 1)
	}); n != 0 || err != nil {
		t.Fatalf("AppendPeerExport allocs = %v, err %v; want 0, nil", n, err)
	}
	small, _ := AppendPeerExport(nil, j, j.Epoch, j.Next()-5, 200, addrs[:3], work[:3], 1.25, 1)
	var p PeerExport
	if err := p.Decode(buf); err != nil {
		t.Fatal(err)
	}
	sum := 0
	if n := testing.AllocsPerRun(100, func() {
		if err := p.Decode(small); err != nil {
			t.Fatal(err)
		}
		if err := p.Decode(buf); err != nil {
			t.Fatal(err)
		}
		if string(p.Addr(7)) == addrs[7] {
			sum++
		}
		p.Each(func(r int, c []uint64) { sum += r + len(c) })
	}); n != 0 {
		t.Fatalf("PeerExport.Decode allocs = %v, want 0", n)
	}
}

func BenchmarkPeerExportAppend(b *testing.B) {
	j, addrs, work := benchPeer()
	buf := make([]byte, 0, 1<<17)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendPeerExport(buf[:0], j, j.Epoch, 0, 256, addrs, work, 1.25, 1)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkPeerExportDecode(b *testing.B) {
	j, addrs, work := benchPeer()
	buf, _ := AppendPeerExport(nil, j, j.Epoch, 0, 256, addrs, work, 1.25, 1)
	var p PeerExport
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := p.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}
