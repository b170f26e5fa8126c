package router

import (
	"github.com/gpuroute/gpuroute/plugin/config"
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring/prefix"
)

// membership is this worker's place among the worker VMs of one Envoy: its
// worker id, taken from a shared counter (shared.KeyWorkerSeq), and the
// shared list of workers (shared.KeyRegistry) that tells each worker whose
// work records and adapter records to read. It owns both. The lease, the
// work and adapter exchanges read the id and the list; the prefix share and
// the peer exchange draw their nonces from it.
type membership struct {
	rootID  uint32
	scraper bool // a scraper VM takes an id but is not listed
	log     logPrefix

	worker     uint64 // 0 until an id is taken
	registered bool
	registry   shared.Registry
	buf        []byte
}

func (m *membership) setup(rootID uint32, cfg *config.Config, log logPrefix) {
	m.rootID, m.scraper, m.log = rootID, cfg.Scraper, log
}

// join takes a worker id and adds it to the shared worker list so the other
// workers read this one's in-flight work. Ids come from a CAS counter; the
// list is updated with CAS too (a lost race retries on the next tick). A
// scraper's id carries shared.ScraperBit and is not listed: it has no work
// for the workers to read on every request (TestScraperRole).
func (m *membership) join(now int64) {
	if m.worker == 0 {
		id, ok := m.nextWorkerID(now)
		if !ok {
			return
		}
		if m.scraper {
			m.worker, m.registered = id|shared.ScraperBit, true
			return
		}
		m.worker = id
	}
	v, cas, err := proxy.GetSharedData(shared.KeyRegistry)
	switch {
	case err == proxy.ErrNotFound:
		m.registry.Workers = m.registry.Workers[:0]
		cas = 0
	case err != nil:
		return
	default:
		if m.registry.Decode(v) != nil {
			m.registry.Workers = m.registry.Workers[:0] // a garbled list is rebuilt by the next joins
		}
	}
	if !m.registry.Add(m.worker) {
		m.log.warn("worker list full; this worker's in-flight work is not shared")
		m.registered = true
		return
	}
	buf, err := m.registry.AppendBinary(m.buf[:0])
	if err != nil {
		return
	}
	m.buf = buf
	if proxy.SetSharedData(shared.KeyRegistry, buf, cas) == nil {
		m.registered = true
	}
}

// leave removes this worker from the list, best effort.
func (m *membership) leave() {
	if !m.registered || m.scraper {
		return
	}
	for range 3 {
		v, cas, err := proxy.GetSharedData(shared.KeyRegistry)
		if err != nil || m.registry.Decode(v) != nil {
			return
		}
		m.registry.Remove(m.worker)
		buf, err := m.registry.AppendBinary(m.buf[:0])
		if err != nil {
			return
		}
		m.buf = buf
		if proxy.SetSharedData(shared.KeyRegistry, buf, cas) != proxy.ErrCASMismatch {
			return
		}
	}
}

// adopt takes from's worker id and place in the worker list, and reports
// whether it did: a root of another role (worker or scraper) joins anew.
func (m *membership) adopt(from *membership) bool {
	if from.scraper != m.scraper {
		return false
	}
	m.worker, m.registered = from.worker, from.registered
	m.registry.Workers = append(m.registry.Workers[:0], from.registry.Workers...)
	return true
}

// readRegistry refreshes the worker list from shared data; it reports
// false, keeping the list as it was, when the value cannot be read.
func (m *membership) readRegistry() bool {
	v, _, err := proxy.GetSharedData(shared.KeyRegistry)
	return err == nil && m.registry.Decode(v) == nil
}

// others reports whether other workers are listed besides this one.
func (m *membership) others() bool { return m.worker != 0 && len(m.registry.Workers) > 1 }

// nextWorkerID increments the shared worker counter. The value carries a
// nonce: two workers creating the missing key at once both succeed (Envoy
// ignores CAS on a missing key, docs/abi.md "Envoy behaviour"), and the
// re-read tells the loser.
func (m *membership) nextWorkerID(now int64) (uint64, bool) {
	nonce := uint64(now) ^ uint64(m.rootID)<<40 ^ prefix.HashString(string(m.log))
	var buf [16]byte
	for range 8 {
		v, cas, err := proxy.GetSharedData(shared.KeyWorkerSeq)
		var n uint64
		switch {
		case err == proxy.ErrNotFound:
			cas = 0
		case err != nil:
			return 0, false
		default:
			n, _, _ = shared.DecodeWorkerSeq(v)
		}
		n++
		if proxy.SetSharedData(shared.KeyWorkerSeq, shared.AppendWorkerSeq(buf[:0], n, nonce), cas) != nil {
			continue
		}
		if v, _, err := proxy.GetSharedData(shared.KeyWorkerSeq); err == nil {
			if _, got, ok := shared.DecodeWorkerSeq(v); ok && got == nonce {
				return n, true
			}
		}
	}
	return 0, false
}

// nonce returns a nonzero value unlikely to repeat across restarts: the
// epoch of a new shared prefix index base or peer journal.
func (m *membership) nonce(now int64) uint64 {
	return (uint64(now)*0x9e3779b97f4a7c15 ^ m.worker<<32 ^ uint64(m.rootID)) | 1
}
