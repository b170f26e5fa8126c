package shared

import (
	"math"
	"strconv"

	"github.com/gpuroute/gpuroute/plugin/metrics"
)

// Bounds on a snapshot, enforced by both AppendBinary and Decode so that a
// corrupt or hostile value cannot make a reader allocate without limit.
const (
	// MaxReplicas bounds Snapshot.Replicas and WorkRecord.Work.
	MaxReplicas = 1024
	// MaxAdapters bounds Replica.Adapters; it equals metrics.MaxAdapterList,
	// the most one scrape can report per list.
	MaxAdapters = 64
	// MaxAdapterName bounds an adapter name in bytes (metrics keeps at most
	// metrics.AdapterNameCap, well below it).
	MaxAdapterName = 128
)

// ScrapeError says why the last scrape attempt of a replica failed.
type ScrapeError uint8

// ScrapeError values; the encoding rejects anything above ScrapeGarbage.
const (
	// ScrapeOK: the last attempt succeeded.
	ScrapeOK ScrapeError = iota
	// ScrapeTimeout: proxy_http_call failed or timed out (no response).
	ScrapeTimeout
	// ScrapeHTTPStatus: the endpoint answered with a non-2xx status
	// (Replica.HTTPStatus holds it).
	ScrapeHTTPStatus
	// ScrapeTruncated: the body was cut short (metrics.ProblemTruncated).
	ScrapeTruncated
	// ScrapeGarbage: no valid sample of a metric read (metrics.ProblemNoSamples).
	ScrapeGarbage
)

// String returns the lowercase name used in stats and logs.
func (e ScrapeError) String() string {
	switch e {
	case ScrapeOK:
		return "ok"
	case ScrapeTimeout:
		return "timeout"
	case ScrapeHTTPStatus:
		return "http_status"
	case ScrapeTruncated:
		return "truncated"
	case ScrapeGarbage:
		return "garbage"
	}
	return "scrape_error_" + strconv.Itoa(int(e))
}

// AdapterState is one LoRA adapter a replica reported in its last good scrape.
type AdapterState struct {
	// Name is the adapter name as the server reported it (metrics keeps the
	// first metrics.AdapterNameCap bytes of longer names).
	Name string
	// Waiting is true when the adapter appeared only in the waiting list, not
	// in the running one: it has queued requests but may not be on the GPU.
	Waiting bool
}

// Replica is the scraped state of one replica, index-aligned with the
// configured replica list. Figures are the last good scrape's: a failed scrape
// only updates AttemptNanos, Failures, LastError and HTTPStatus, so readers
// decide staleness from ScrapedNanos (stale means uncertain, not ideal:
// docs/design.md "Health and drains"). The zero Replica is "never scraped" except MaxAdapters, which should
// be -1; use Reset.
type Replica struct {
	ScrapedNanos int64       // time of the last good scrape; 0 = never
	AttemptNanos int64       // time of the last attempt, good or not
	Failures     uint32      // consecutive failed attempts since the last good one
	LastError    ScrapeError // outcome of the last attempt
	HTTPStatus   uint16      // status of the last attempt when LastError is ScrapeHTTPStatus, else 0

	Waiting, Running int32   // requests queued and running
	KVUsage          float32 // fraction of KV cache in use, in [0,1]
	KVCapacityTokens int32   // KV cache size in tokens; 0 unknown
	BlockSizeTokens  int32   // tokens per KV block; 0 unknown
	MaxAdapters      int32   // LoRA slots on the GPU (vLLM max_lora); -1 unknown

	// Adapters lists the adapters with running or waiting requests, running
	// ones first, at most MaxAdapters.
	Adapters []AdapterState
}

// Reset makes r "never scraped", keeping the Adapters capacity.
func (r *Replica) Reset() {
	a := r.Adapters[:0]
	*r = Replica{MaxAdapters: -1, Adapters: a}
}

// ApplySample records a scrape parsed by metrics. Fields present in s overwrite
// r's; fields s lacks keep their last value (TGI, for instance, never reports
// KV usage). A sample with metrics.ProblemNoSamples or
// metrics.ProblemTruncated counts as a failed scrape (ApplyFailure with
// ScrapeGarbage or ScrapeTruncated) and changes no figure: a cut body may have
// lost part of the adapter list. Adapter names are reused from r when equal,
// so a steady fleet applies samples without allocating.
func (r *Replica) ApplySample(s *metrics.Sample, nowNanos int64) {
	if s.Problems&metrics.ProblemNoSamples != 0 {
		r.ApplyFailure(ScrapeGarbage, 0, nowNanos)
		return
	}
	if s.Problems&metrics.ProblemTruncated != 0 {
		r.ApplyFailure(ScrapeTruncated, 0, nowNanos)
		return
	}
	r.ScrapedNanos, r.AttemptNanos = nowNanos, nowNanos
	r.Failures, r.LastError, r.HTTPStatus = 0, ScrapeOK, 0
	if s.Has(metrics.FieldWaiting) {
		r.Waiting = clamp32(s.Waiting)
	}
	if s.Has(metrics.FieldRunning) {
		r.Running = clamp32(s.Running)
	}
	if s.Has(metrics.FieldKVUsage) && s.KVUsage == s.KVUsage { // NaN keeps the last value
		r.KVUsage = float32(min(max(s.KVUsage, 0), 1))
	}
	if s.Has(metrics.FieldKVCapacityTokens) {
		r.KVCapacityTokens = clamp32(s.KVCapacityTokens)
	}
	if s.Has(metrics.FieldBlockSizeTokens) {
		r.BlockSizeTokens = clamp32(s.BlockSizeTokens)
	}
	if s.Has(metrics.FieldMaxAdapters) {
		r.MaxAdapters = clamp32(s.MaxAdapters)
	}
	if s.Has(metrics.FieldAdapters) {
		n := 0
		for i := range s.RunningAdapters {
			n = r.putAdapter(n, s.RunningAdapters[i].Name(), false)
		}
		for i := range s.WaitingAdapters {
			n = r.putAdapter(n, s.WaitingAdapters[i].Name(), true)
		}
		r.Adapters = r.Adapters[:n]
	}
}

// putAdapter writes name at position n of r.Adapters unless it is empty,
// already among the first n (running wins over waiting) or the list is full,
// and returns the new count. It reuses an equal name string from the old
// entries at n and beyond by swapping it into place.
func (r *Replica) putAdapter(n int, name []byte, waiting bool) int {
	if len(name) == 0 || len(name) > MaxAdapterName || n >= MaxAdapters {
		return n
	}
	for i := 0; i < n; i++ {
		if r.Adapters[i].Name == string(name) {
			return n
		}
	}
	if n >= len(r.Adapters) {
		if n < cap(r.Adapters) {
			r.Adapters = r.Adapters[:n+1]
		} else {
			r.Adapters = append(r.Adapters, AdapterState{})
		}
	}
	reuseName(r.Adapters[n:], name)
	r.Adapters[n].Waiting = waiting
	return n + 1
}

// reuseName sets a[0].Name to name, swapping in an equal string from a[1:] (or
// from the slice's spare capacity) when there is one, else allocating.
func reuseName(a []AdapterState, name []byte) {
	if a[0].Name == string(name) {
		return
	}
	full := a[:cap(a)]
	for j := 1; j < len(full); j++ {
		if full[j].Name == string(name) {
			full[0], full[j] = full[j], full[0]
			return
		}
	}
	a[0].Name = string(name)
}

// ApplyFailure records a failed scrape attempt of the given kind (httpStatus
// only matters for ScrapeHTTPStatus). The last good figures and ScrapedNanos
// stay: a failed scrape never blanks state, it only ages it.
func (r *Replica) ApplyFailure(kind ScrapeError, httpStatus uint16, nowNanos int64) {
	if kind == ScrapeOK || kind > ScrapeGarbage {
		kind = ScrapeGarbage
	}
	if kind != ScrapeHTTPStatus {
		httpStatus = 0
	}
	r.AttemptNanos = nowNanos
	if r.Failures < math.MaxUint32 {
		r.Failures++
	}
	r.LastError, r.HTTPStatus = kind, httpStatus
}

func clamp32(v int64) int32 {
	return int32(min(max(v, math.MinInt32), math.MaxInt32))
}

// Snapshot is the fleet state the scraping leader publishes in shared data
// (KeySnapshot) and every worker reads. Readers decode only when the value's
// CAS changes, and ignore a snapshot whose ConfigID is not theirs.
type Snapshot struct {
	Generation   uint64 // incremented by the writer on every publish
	WrittenNanos int64  // writer's clock at publish
	ConfigID     uint64 // ConfigIDOf the replica list Replicas is aligned with
	Replicas     []Replica
}

// SetLen sets len(s.Replicas) to n, reusing capacity; replicas added beyond the
// old length are Reset (never scraped).
func (s *Snapshot) SetLen(n int) {
	old := len(s.Replicas)
	s.Replicas = growReplicas(s.Replicas, n)
	for i := old; i < n; i++ {
		s.Replicas[i].Reset()
	}
}

// growReplicas returns rs with length n, keeping existing elements (and their
// adapter slices) and capacity where possible.
func growReplicas(rs []Replica, n int) []Replica {
	if n <= cap(rs) {
		return rs[:n]
	}
	nr := make([]Replica, n)
	copy(nr, rs[:cap(rs)])
	return nr
}

// Snapshot encoding, version 1, little-endian:
//
//	header   "GRFS" version=1 u8, generation u64, written i64, configID u64, replicas u16
//	replica  (snapReplicaLen bytes) scraped i64, attempt i64, failures u32,
//	         lastError u8, httpStatus u16, waiting i32, running i32,
//	         kvUsage f32 (IEEE 754 bits), kvCapacity i32, blockSize i32,
//	         maxAdapters i32, adapters u8,
//	         then per adapter: flags u8 (bit 0 waiting), nameLen u8, name
const (
	snapHeaderLen  = headerLen + 8 + 8 + 8 + 2
	snapReplicaLen = 8 + 8 + 4 + 1 + 2 + 4 + 4 + 4 + 4 + 4 + 4 + 1
	snapAdapterMin = 2 + 1 // flags, length, at least one name byte
)

// EncodedLen returns the length of s's encoding, to size a reusable buffer.
func (s *Snapshot) EncodedLen() int {
	n := snapHeaderLen + snapReplicaLen*len(s.Replicas)
	for i := range s.Replicas {
		for _, a := range s.Replicas[i].Adapters {
			n += 2 + len(a.Name)
		}
	}
	return n
}

// AppendBinary appends s's versioned encoding to b. It fails, returning b
// unchanged, when a bound is exceeded or a field is out of range (the same
// rules Decode enforces, so whatever encodes also decodes). With enough
// capacity in b it does not allocate.
func (s *Snapshot) AppendBinary(b []byte) ([]byte, error) {
	if err := s.check(); err != nil {
		return b, err
	}
	b = appendHeader(b, magicSnapshot)
	b = appendU64(b, s.Generation)
	b = appendU64(b, uint64(s.WrittenNanos))
	b = appendU64(b, s.ConfigID)
	b = appendU16(b, uint16(len(s.Replicas)))
	for i := range s.Replicas {
		r := &s.Replicas[i]
		b = appendU64(b, uint64(r.ScrapedNanos))
		b = appendU64(b, uint64(r.AttemptNanos))
		b = appendU32(b, r.Failures)
		b = append(b, byte(r.LastError))
		b = appendU16(b, r.HTTPStatus)
		b = appendU32(b, uint32(r.Waiting))
		b = appendU32(b, uint32(r.Running))
		b = appendU32(b, math.Float32bits(r.KVUsage))
		b = appendU32(b, uint32(r.KVCapacityTokens))
		b = appendU32(b, uint32(r.BlockSizeTokens))
		b = appendU32(b, uint32(r.MaxAdapters))
		b = append(b, byte(len(r.Adapters)))
		for _, a := range r.Adapters {
			f := byte(0)
			if a.Waiting {
				f = 1
			}
			b = append(b, f, byte(len(a.Name)))
			b = append(b, a.Name...)
		}
	}
	return b, nil
}

// check applies the decoder's rules to s before encoding.
func (s *Snapshot) check() error {
	if len(s.Replicas) > MaxReplicas {
		return fail(ErrInvalid, "snapshot replica count", int64(len(s.Replicas)), "exceeds "+strconv.Itoa(MaxReplicas))
	}
	for i := range s.Replicas {
		r := &s.Replicas[i]
		if err := checkReplica(r.LastError, r.KVUsage, r.MaxAdapters, len(r.Adapters)); err != nil {
			return err
		}
		for _, a := range r.Adapters {
			if len(a.Name) == 0 || len(a.Name) > MaxAdapterName {
				return fail(ErrInvalid, "snapshot adapter name length", int64(len(a.Name)), "must be 1.."+strconv.Itoa(MaxAdapterName))
			}
		}
	}
	return nil
}

func checkReplica(e ScrapeError, kv float32, maxAdapters int32, adapters int) error {
	if e > ScrapeGarbage {
		return fail(ErrInvalid, "snapshot last error", int64(e), "unknown scrape error")
	}
	if !(kv >= 0 && kv <= 1) { // also rejects NaN
		return &codecError{msg: "shared: snapshot kv usage " + strconv.FormatFloat(float64(kv), 'g', -1, 32) + ": must be in [0,1]", kind: ErrInvalid}
	}
	if maxAdapters < -1 {
		return fail(ErrInvalid, "snapshot max adapters", int64(maxAdapters), "must be >= -1")
	}
	if adapters > MaxAdapters {
		return fail(ErrInvalid, "snapshot adapter count", int64(adapters), "exceeds "+strconv.Itoa(MaxAdapters))
	}
	return nil
}

// Decode replaces s with the snapshot encoded in b. It validates all of b
// before touching s, so on error s is unchanged (a reader keeps its last good
// snapshot). It reuses s's slices and keeps each adapter name string whose
// bytes are unchanged, so decoding a steady fleet allocates nothing. The
// decoded slices alias nothing in b.
func (s *Snapshot) Decode(b []byte) error {
	if err := decodeSnapshot(b, nil); err != nil {
		return err
	}
	return decodeSnapshot(b, s)
}

// decodeSnapshot validates b and, when s is non-nil, writes it into s. The
// write pass runs only after a clean validation pass, so it cannot fail.
func decodeSnapshot(b []byte, s *Snapshot) error {
	r := reader{b: b}
	if err := r.header(magicSnapshot, "snapshot"); err != nil {
		return err
	}
	gen, written, cfg := r.u64(), int64(r.u64()), r.u64()
	n := int(r.u16())
	if r.short {
		return r.shortErr("snapshot header")
	}
	if n > MaxReplicas {
		return fail(ErrInvalid, "snapshot replica count", int64(n), "exceeds "+strconv.Itoa(MaxReplicas))
	}
	if r.left() < n*snapReplicaLen { // before allocating anything for n
		return fail(ErrShort, "snapshot replica count", int64(n), "needs more bytes than the value has")
	}
	if s != nil {
		s.Generation, s.WrittenNanos, s.ConfigID = gen, written, cfg
		s.Replicas = growReplicas(s.Replicas, n)
	}
	for i := 0; i < n; i++ {
		var x Replica
		x.ScrapedNanos = int64(r.u64())
		x.AttemptNanos = int64(r.u64())
		x.Failures = r.u32()
		x.LastError = ScrapeError(r.u8())
		x.HTTPStatus = r.u16()
		x.Waiting = int32(r.u32())
		x.Running = int32(r.u32())
		x.KVUsage = math.Float32frombits(r.u32())
		x.KVCapacityTokens = int32(r.u32())
		x.BlockSizeTokens = int32(r.u32())
		x.MaxAdapters = int32(r.u32())
		na := int(r.u8())
		if r.short {
			return r.shortErr("snapshot replica " + strconv.Itoa(i))
		}
		if err := checkReplica(x.LastError, x.KVUsage, x.MaxAdapters, na); err != nil {
			return err
		}
		if r.left() < na*snapAdapterMin {
			return fail(ErrShort, "snapshot adapter count", int64(na), "needs more bytes than the value has")
		}
		var dst *Replica
		if s != nil {
			dst = &s.Replicas[i]
			x.Adapters = dst.Adapters
			*dst = x
			if na <= cap(dst.Adapters) {
				dst.Adapters = dst.Adapters[:na]
			} else {
				a := make([]AdapterState, na)
				copy(a, dst.Adapters[:cap(dst.Adapters)])
				dst.Adapters = a
			}
		}
		for j := 0; j < na; j++ {
			f := r.u8()
			name := r.take(int(r.u8()))
			if r.short {
				return r.shortErr("snapshot adapter")
			}
			if f > 1 {
				return fail(ErrInvalid, "snapshot adapter flags", int64(f), "only bit 0 (waiting) is defined")
			}
			if len(name) == 0 || len(name) > MaxAdapterName {
				return fail(ErrInvalid, "snapshot adapter name length", int64(len(name)), "must be 1.."+strconv.Itoa(MaxAdapterName))
			}
			if dst != nil {
				reuseName(dst.Adapters[j:], name)
				dst.Adapters[j].Waiting = f == 1
			}
		}
	}
	return r.end("snapshot")
}
