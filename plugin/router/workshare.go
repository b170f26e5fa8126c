package router

import (
	"slices"

	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
	"github.com/gpuroute/gpuroute/scoring"
)

// workShare shares in-flight work between the worker VMs of one Envoy:
// each publishes its ledger's work per replica under its own key (a
// shared.WorkRecord) and reads the others' into a shared.Board. It owns
// this worker's record and the board. The view adds the board's sums to
// each replica's PeerWork before a decision (readBoard, then the board's
// Gather); the peer exchange exports this gateway's total (gatewayWork).
type workShare struct {
	ledger  *scoring.Ledger
	members *membership
	calib   *calibration
	health  *health
	ttl     int64 // how long a record counts (peerWorkTTL)

	key    string // this worker's record key (shared.WorkKey)
	record shared.WorkRecord
	buf    []byte // record's encoding, patched in place per request
	moved  []int  // refresh's scratch

	board  shared.Board
	keys   []string // the record keys of the workers in keysOf
	keysOf []uint64
}

func (w *workShare) setup(n int, configID uint64, ttl int64, ledger *scoring.Ledger, m *membership, c *calibration, h *health) {
	w.ledger, w.members, w.calib, w.health, w.ttl = ledger, m, c, h, ttl
	w.board.ConfigID = configID
	w.record.ConfigID = configID
	w.record.Work = make([]scoring.Work, n)
	w.moved = make([]int, 0, n)
}

// workOn returns this worker's outstanding work on replica i, priced with
// the replica's calibrated hardware and as of its evidence time.
func (w *workShare) workOn(i int) scoring.Work {
	return w.ledger.WorkOn(i, &w.calib.hardware[i], w.health.evidence(i))
}

// identify takes the worker id once membership has one: the record is
// published under its key.
func (w *workShare) identify() {
	if id := w.members.worker; w.record.Worker != id {
		w.record.Worker, w.key = id, shared.WorkKey(id)
	}
}

// refresh republishes this worker's record at the tick: its rate and time
// always (a record that stops moving expires), and the entries that moved
// since they were published (a scrape's unseen work, a prefill's window),
// as patches when a few did, so that the other workers read and sum those
// entries again, not the whole record (TestTickPatchesWorkRecords).
func (w *workShare) refresh(now int64) {
	w.identify()
	moved := w.moved[:0]
	for i := range w.record.Work {
		if x := w.workOn(i); x != w.record.Work[i] {
			w.record.Work[i] = x
			moved = append(moved, i)
		}
	}
	w.moved = moved
	if len(moved) > shared.MaxPatches || len(w.record.Work) == 0 {
		w.write(now)
		return
	}
	if len(moved) == 0 {
		// A publish of an unchanged entry carries the new time and rate.
		moved = append(moved, 0)
	}
	w.record.WrittenNanos, w.record.ArrivalPerSec = now, w.ledger.Rate(now)
	for _, i := range moved {
		if !w.record.PutEntry(w.buf, i) {
			w.write(now)
			return
		}
	}
	_ = proxy.SetSharedData(w.key, w.buf, 0)
}

// publishOn updates this worker's published work for one replica (the one
// a request was just dispatched to, or that answered).
func (w *workShare) publishOn(replica int, now int64) {
	if w.members.worker == 0 || len(w.members.registry.Workers) < 2 || replica < 0 || replica >= len(w.record.Work) {
		return
	}
	w.identify()
	w.record.Work[replica] = w.workOn(replica)
	w.record.WrittenNanos, w.record.ArrivalPerSec = now, w.ledger.Rate(now)
	if w.record.PutEntry(w.buf, replica) {
		_ = proxy.SetSharedData(w.key, w.buf, 0)
		return
	}
	w.write(now)
}

// write encodes this worker's whole record (kept in buf so that publishOn
// can patch one entry) and publishes it under its own key: no contention,
// so no CAS.
func (w *workShare) write(now int64) {
	w.record.WrittenNanos, w.record.ArrivalPerSec = now, w.ledger.Rate(now)
	w.record.NextPublish()
	if buf, err := w.record.AppendBinary(w.buf[:0]); err == nil {
		w.buf = buf
		_ = proxy.SetSharedData(w.key, buf, 0)
	}
}

// retain rereads the worker list and drops the records of workers no
// longer listed.
func (w *workShare) retain() {
	if w.members.readRegistry() {
		w.board.Retain(w.members.registry.Workers)
	}
}

// gatewayWork sets dst to this gateway's own in-flight work per replica,
// and returns its dispatch rate: this worker's ledger and the other
// workers' records, without the work imported from peer gateways
// (exporting that would echo a peer's work back to it).
func (w *workShare) gatewayWork(now int64, dst []scoring.Work) (perSec float64) {
	clear(dst)
	if w.members.others() {
		w.readBoard()
		_, perSec = w.board.Sum(w.members.worker, now, w.ttl, dst)
	}
	for i := range dst {
		x := w.workOn(i)
		dst[i].Add(&x)
	}
	return perSec + w.ledger.Rate(now)
}

// readBoard reads the other workers' records, decoding only those whose
// CAS changed.
func (w *workShare) readBoard() {
	workers := w.members.registry.Workers
	if !slices.Equal(w.keysOf, workers) {
		// Built when the worker list changes, not per request and peer.
		w.keysOf = append(w.keysOf[:0], workers...)
		w.keys = w.keys[:0]
		for _, id := range w.keysOf {
			w.keys = append(w.keys, shared.WorkKey(id))
		}
	}
	for i, id := range w.keysOf {
		if id == w.members.worker {
			continue
		}
		if v, cas, err := proxy.GetSharedData(w.keys[i]); err == nil {
			_ = w.board.Update(id, cas, v)
		}
	}
}
